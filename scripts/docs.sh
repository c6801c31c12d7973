#!/usr/bin/env bash
# Builds the DocC documentation of the libraries host apps use (OfflineAgent,
# OfflineServe) with warnings as errors (broken symbol links, parameter docs that do
# not match), after checking that every public declaration has a doc comment.
# Output: .build/docs/<Target>.doccarchive (scripts/test.sh runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
targets=(OfflineAgent OfflineServe)

# A public declaration (attributes on the lines above it allowed) needs a `///`
# comment, or a `*/` ending one, right above it. Extensions and imports need none.
missing=0
for target in "${targets[@]}"; do
    while IFS= read -r line; do
        echo "$line: public declaration without a doc comment" >&2
        missing=$((missing + 1))
    done < <(find "Sources/$target" -name '*.swift' -print0 | sort -z | xargs -0 awk '
        FNR == 1 { documented = 0 }
        /^[[:space:]]*@[A-Za-z_]+(\(.*\))?[[:space:]]*$/ { next }
        /^[[:space:]]*(@[A-Za-z_]+(\([^)]*\))?[[:space:]]+)*(public|open)[[:space:]]/ &&
            !/^[[:space:]]*public[[:space:]]+(import|extension)[[:space:]]/ &&
            !/^[[:space:]]*open[[:space:]]*[-+*\/]?=/ && !documented {
            print FILENAME ":" FNR ": " $0
        }
        { documented = ($0 ~ /^[[:space:]]*\/\/\// || $0 ~ /\*\/[[:space:]]*$/) }')
done
((missing == 0)) || { echo "docs: $missing public declarations lack a doc comment" >&2; exit 1; }

mkdir -p .build/docs
for target in "${targets[@]}"; do
    echo "== docs: $target"
    rm -rf ".build/docs/$target.doccarchive"
    timeout 900 swift package --allow-writing-to-directory .build/docs \
        generate-documentation --target "$target" --warnings-as-errors \
        --output-path ".build/docs/$target.doccarchive"
done
