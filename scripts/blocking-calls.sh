#!/usr/bin/env bash
# Which code blocks a thread of Swift's cooperative pool? Runs the tests (or `swift test`
# with the given arguments) with a preload that records every blocking call made while a
# Swift job runs (fsync family, sleeps, waits for a child, accept/recv/connect, reads of
# pipes and sockets, semaphores; scripts/blocking/blockdetect.c), then prints the call
# sites, product code (Sources/) first, counted.
#   scripts/blocking-calls.sh [SWIFT TEST ARGUMENTS...]
#   SLOW_FSYNC_US=30000 scripts/blocking-calls.sh   also makes every fsync take 30 ms
#                                                   (scripts/blocking/slowsync.c), as a
#                                                   disk busy with writeback does
# Every in-process server of the tests runs its requests on that pool: a call listed
# under Sources/ stalls them all while it lasts (with slow fsync, the tests show it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
out=.build/blocking
mkdir -p "$out"
gcc -O2 -shared -fPIC -o "$out/blockdetect.so" scripts/blocking/blockdetect.c -ldl
preload="$PWD/$out/blockdetect.so"
if [[ -n ${SLOW_FSYNC_US:-} ]]; then
    gcc -O2 -shared -fPIC -o "$out/slowsync.so" scripts/blocking/slowsync.c -ldl
    preload="$preload:$PWD/$out/slowsync.so"
fi
log="$PWD/$out/calls.log"
rm -f "$log"
swift build --build-tests
status=0
BLOCKDETECT_LOG="$log" LD_PRELOAD="$preload" swift test --skip-build "$@" >"$out/test.log" 2>&1 || status=$?
tail -n 1 "$out/test.log"
[[ -s $log ]] || { echo "no blocking call on a Swift job"; exit "$status"; }

# Each record: "<call> | module+offset ...". Frames of the test bundle are turned into
# file:line with one addr2line run; the chain of this repository's frames is kept up to
# and including the first test frame.
bundle=$(grep -m 1 -o '[^ ]*PackageTests[^ +]*' "$log" | sed -n 1p)
tr ' ' '\n' <"$log" | grep -F "$bundle+" | sort -u >"$out/frames"
sed 's/.*+//' "$out/frames" | addr2line -e "$bundle" | paste "$out/frames" - >"$out/symbols"
summary=$(awk -F'\t' -v root="$PWD/" '
    FNR == NR { where = $2; sub(/ .*/, "", where); if (index(where, root) == 1) map[$1] = substr(where, length(root) + 1); next }
    {
        chain = ""
        for (i = 3; i <= NF; i++) {
            if (!($i in map)) continue
            chain = chain (chain == "" ? "" : " < ") map[$i]
            if (map[$i] ~ /^Tests\//) break
        }
        if (chain != "") print $1 "\t" chain
    }' "$out/symbols" FS=' ' "$log" | sort | uniq -c | sort -rn)
echo "== made by product code on its own (no test frame: a server's request, a sync, a lifecycle call):"
grep -v 'Tests/' <<<"$summary" || echo "   none"
echo "== made by product code a test called synchronously, the 20 most frequent:"
grep -P '\tSources/.*Tests/' <<<"$summary" | sed -n 1,20p
echo "== made by the tests themselves, the 20 most frequent:"
grep -P '\tTests/' <<<"$summary" | sed -n 1,20p
exit "$status"
