#!/usr/bin/env bash
# Checks the engine's layering (issue 40): no file in Sources/OfflineAgent/Store/ names a
# type declared in Sources/OfflineAgent/Install/. The store is the on-disk layout; the
# install builds on it, never the other way round.
#   scripts/check-layers.sh        exits 1 and lists each file:line that names one
set -euo pipefail
cd "$(dirname "$0")/.."
src=Sources/OfflineAgent
# Every type (and extension-only namespace) Install/ declares, by name.
mapfile -t types < <(sed -nE 's/^(public |package |private |fileprivate )?(final )?(struct|enum|class|actor|protocol|typealias) +([A-Za-z_][A-Za-z0-9_]*).*/\4/p' "$src"/Install/*.swift | sort -u)
((${#types[@]})) || { echo "check-layers: no types found in $src/Install/ (has it moved?)" >&2; exit 2; }
pattern="\\b($(IFS='|'; echo "${types[*]}"))\\b"
if grep -nE "$pattern" "$src"/Store/*.swift; then
    echo "check-layers: the files above in $src/Store/ name types of $src/Install/ (move the code to Install/, or the type down)" >&2
    exit 1
fi
echo "check-layers: $src/Store/ names none of the ${#types[@]} types of $src/Install/"
