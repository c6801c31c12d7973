#!/usr/bin/env bash
# Extraction of one zip by `offline-agent extract` against bsdtar (libarchive-tools) and
# 7zz (7zip), alternating, each run after `sync; sleep 0.3`; prints every time and the
# median; checks the three trees are identical.
#
#   RUNS=7 [WORKDIR=/tmp] bench/extract-archivers.sh OFFLINE_AGENT ZIP   (WORKDIR=/dev/shm: no disk in the figures)
set -euo pipefail
OURS=$1 ZIP=$2 RUNS=${RUNS:-7}
command -v bsdtar >/dev/null && command -v 7zz >/dev/null || { echo "needs bsdtar and 7zz (apt-get install libarchive-tools 7zip)" >&2; exit 1; }
W=$(mktemp -d "${WORKDIR:-/tmp}/extract-archivers.XXXXXX"); trap 'rm -rf "$W"' EXIT
t() { local s e; sync; sleep 0.3; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
declare -A T
for _ in $(seq "$RUNS"); do
  rm -rf "$W/o"; T[ours]+=" $(t "$OURS" extract "$ZIP" "$W/o")"
  rm -rf "$W/b"; mkdir "$W/b"; T[bsdtar]+=" $(t bsdtar -xf "$ZIP" -C "$W/b")"
  rm -rf "$W/z"; T[7zz]+=" $(t 7zz x -y -o"$W/z" "$ZIP")"
done
diff -r "$W/o" "$W/b" >/dev/null && diff -r "$W/o" "$W/z" >/dev/null || { echo "trees differ" >&2; exit 1; }
for k in ours bsdtar 7zz; do
  sorted=$(echo ${T[$k]} | tr ' ' '\n' | sort -n)
  echo "$k: $(echo $sorted) median $(echo "$sorted" | sed -n "$(( (RUNS + 1) / 2 ))p")"
done
