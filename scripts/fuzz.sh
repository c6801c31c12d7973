#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers that read hostile bytes (see fuzz/build.sh).
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 60 s; targets: bspatch cbz zip layout splitter manifest setcookie)
# Each target first re-runs its regression inputs (fixtures/fuzz/regressions/<target>-*),
# then fuzzes from the committed seeds (fixtures/fuzz/<target>/) plus a scratch corpus
# in .build-fuzz/corpus/<target> (new inputs go there, never into the seeds).
# Prints executions and coverage per target; exits non-zero on any finding
# (crash, sanitizer report, leak, timeout, out of memory), saved in .build-fuzz/findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(bspatch cbz zip layout splitter manifest setcookie)
out=.build-fuzz

mkdir -p "$out"
build() { fuzz/build.sh "$out" >"$out/build.log" 2>&1; }
status=0
# FUZZ_NO_BUILD=1 reuses the targets already built (e.g. to run several targets in parallel).
[[ ${FUZZ_NO_BUILD:-0} == 1 ]] || build || status=$?
if ((status == 3)); then
    # No clang with libFuzzer next to swiftc: Debian's clang and its runtimes.
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
    status=0
    build || status=$?
fi
((status == 0)) || { cat "$out/build.log"; exit 1; }

export CBSPATCH_FUZZ_OLD=$PWD/fixtures/fuzz/bspatch-old.bin
export SWIFT_BACKTRACE=enable=no # a Swift trap goes straight to libFuzzer's handler
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
mkdir -p "$out/findings"
failed=0
printf '%-10s %10s %8s %8s %8s  %s\n' target executions seconds cov ft result
for target in "${targets[@]}"; do
    corpus=$out/corpus/$target
    log=$out/$target.log
    mkdir -p "$corpus"
    status=0
    regressions=(fixtures/fuzz/regressions/"$target"-*)
    if [[ -e ${regressions[0]} ]]; then
        timeout 300 "$out/$target" -timeout=30 -rss_limit_mb=2048 "${regressions[@]}" >"$log.regressions" 2>&1 </dev/null ||
            status=$?
    fi
    if ((status == 0)); then
        nice -n 19 timeout $((seconds + 300)) "$out/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 \
            -print_final_stats=1 -artifact_prefix="$out/findings/$target-" "$corpus" "fixtures/fuzz/$target" \
            >"$log" 2>&1 </dev/null || status=$?
    else
        cp "$log.regressions" "$log"
    fi
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    coverage=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$coverage")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$coverage")
    result=ok
    if ((status != 0)); then
        result="FINDING (exit $status): $(grep -m1 -E 'ERROR|SUMMARY|Fatal error|deadly|timeout|out-of-memory' "$log" || echo "see $log")"
        failed=1
    fi
    printf '%-10s %10s %8s %8s %8s  %s\n' "$target" "${executions:-0}" "$seconds" "${cov:--}" "${ft:--}" "$result"
done
((failed == 0)) || { echo "findings: $out/findings/ (logs: $out/<target>.log)" >&2; exit 1; }
