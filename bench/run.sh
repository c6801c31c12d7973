#!/usr/bin/env bash
# offline-agent benchmark: `offline-agent patch` vs Debian bspatch, `offline-agent
# extract` vs Info-ZIP unzip, on real web front ends (streamlit + bokeh static
# dirs from PyPI wheels).  See bench/README.md.
#
#   bench/run.sh [all|prepare|footprint|patch|extract|sync|manifest|report|proxy|engine|archivers|install|update]...
#                 (default: all; report, proxy and the engine's three (issue 40) only when named)
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent;
#                                 bench/standin-ours.sh is a bspatch/unzip stand-in for dry runs)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   RUNS=5                        timed runs per tool and case (after 1 untimed warm-up)
#   WORK=bench/work               scratch dir (downloads, packages, patches, outputs)
#   STREAMLIT_V1/STREAMLIT_V2     streamlit versions (default 1.65.0 -> 1.66.0)
#   BOKEH_V1/BOKEH_V2             bokeh versions for the large package (default 3.9.1 -> 3.9.2)
#   SMALL_MB=5                    size of the small package (subset of the streamlit files)
#   JUPYTERLAB_V=4.4.5 GRADIO_V=5.38.0   `engine`: the wheels whose front ends are installed and extracted
#   VERBOSE=1                     also print every run's time and RSS
#   SERVER=/path/to/offline-server  `report`: server under test (default .build/release/offline-server,
#                                 built by scripts/build-release.sh offline-server when BUILD allows)
#   REPORT_SECONDS=10 REPORT_CONNECTIONS=16 REPORT_EVENTS=50   `report`: wrk duration, connections, events per batch
#   M_THREADS=2 M_CONNECTIONS=50 M_DURATION=10s M_ROUNDS=3   `manifest`: wrk load and interleaved rounds (SERVER as for `report`)
#
# Adding a section (e.g. `sync`): write `section_sync() { ... }` using measure /
# median / summary below, and add `sync` to SECTIONS.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
NAME="" . "$ROOT/bench/lib.sh"   # wrk_figures
DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
BUILD=${BUILD:-auto}
RUNS=${RUNS:-5}
WORK=${WORK:-$ROOT/bench/work}
RESULTS=${RESULTS:-$ROOT/bench/results.txt}
STREAMLIT_V1=${STREAMLIT_V1:-1.65.0}
STREAMLIT_V2=${STREAMLIT_V2:-1.66.0}
BOKEH_V1=${BOKEH_V1:-3.9.1}
BOKEH_V2=${BOKEH_V2:-3.9.2}
SMALL_MB=${SMALL_MB:-5}
FIXED_MTIME='2020-01-01T00:00:00Z'   # packages are built reproducibly (PROTOCOL.md)

# Targets (bench/README.md).
T_PATCH_TIME=0.7        # ours/bspatch wall time
T_PATCH_RSS_MB=40       # our peak RSS, small and large package
T_PATCH_FLAT_MB=4       # |RSS(large) - RSS(small)|
T_EXTRACT_TIME=0.8      # ours/unzip wall time
T_EXTRACT_RSS_MB=32     # our peak RSS
T_SIZE_MB=25            # the stripped, statically linked device binary
T_NOOP_MS=5             # throttled no-op `sync` wall time (median)
T_SERVE_RSS_MB=15       # `serve` RSS, idle after startup and one request
T_REPORT_EVENTS_S=20000 # offline-server POST /report ingestion, events/s (2 wrk threads, loopback)

SECTIONS=(footprint patch extract sync manifest)   # what `all` runs, in order (after build; prepare when needed)

# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'run.sh: error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "missing tool '$1' (apt-get install ${2:-$1})"; }

SUMMARY=()    # "key=value" lines
VERDICTS=()   # "# PASS ..." / "# FAIL ..." lines
summary() { SUMMARY+=("$1=$2"); }

# calc 'awk expression'  e.g. calc "$a / $b"
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
fmt1() { awk -v x="$1" 'BEGIN { printf "%.1f", x }'; }
fmt2() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }
fmt3() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }              # KiB -> MiB
size_mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1048576 }'; }
size_h() {  # human-readable byte size of a file
  awk -v b="$(stat -c %s "$1")" 'BEGIN { if (b >= 1048576) printf "%.1fM", b/1048576; else printf "%.0fK", b/1024 }'
}

# median of the arguments (numbers)
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit }
    if (NR % 2) printf "%.6g", v[(NR + 1) / 2]; else printf "%.6g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# check KEY VALUE OP LIMIT DESCRIPTION  -> records PASS/FAIL
check() {
  local key=$1 value=$2 op=$3 limit=$4 desc=$5 ok
  ok=$(awk -v v="$value" -v l="$limit" -v op="$op" 'BEGIN {
    if (v == "nan" || v == "") { print "n/a"; exit }
    if (op == "<=") print (v + 0 <= l + 0) ? "PASS" : "FAIL"; else print (v + 0 >= l + 0) ? "PASS" : "FAIL" }')
  VERDICTS+=("# $ok $key=$value (target $op $limit: $desc)")
}

# measure CMD...  -> sets M_WALL (seconds, µs resolution from EPOCHREALTIME) and
# M_RSS_KB (peak RSS of the command from GNU time's %M).  stdout is discarded;
# the command failing aborts the benchmark with its stderr.
M_WALL=0 M_RSS_KB=0
measure() {
  local tf="$WORK/.time" ef="$WORK/.stderr" t0 t1 rc=0
  t0=$EPOCHREALTIME
  /usr/bin/time -f '%e %M' -o "$tf" -- "$@" >/dev/null 2>"$ef" || rc=$?
  t1=$EPOCHREALTIME
  if (( rc != 0 )); then
    cat "$ef" >&2
    die "command failed (exit $rc): $*"
  fi
  M_WALL=$(calc "$t1 - $t0")
  M_RSS_KB=$(awk 'END { print $2 }' "$tf")
}

# drop dirty pages so one run's writes don't get flushed during the next run
settle() { sync; }

# --------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------
do_build() {
  local want=$BUILD
  if [[ $want == auto ]]; then
    [[ $OURS == "$DEFAULT_OURS" ]] && want=1 || want=0
  fi
  if [[ $want == 1 ]]; then
    log "build: scripts/build-release.sh offline-agent"
    "$ROOT/scripts/build-release.sh" offline-agent >&2
  else
    log "build: skipped (OURS=$OURS)"
  fi
  [[ -x $OURS ]] || die "OURS=$OURS is not an executable"
}

# --------------------------------------------------------------------------
# prepare: wheels -> static trees -> stored/deflated zips -> bsdiff patches
# Everything is cached in $WORK; delete $WORK to start over.
# --------------------------------------------------------------------------
fetch_wheel() {  # fetch_wheel DIST VERSION -> prints the wheel path
  local dist=$1 ver=$2 dir="$WORK/wheels" whl
  mkdir -p "$dir"
  whl=$(ls "$dir/$dist-$ver-"*.whl 2>/dev/null | head -n1 || true)
  if [[ -z $whl ]]; then
    # one version per call: pip refuses two versions of one project in a single resolve
    pip download -q --no-deps --only-binary=:all: -d "$dir" "$dist==$ver" >&2
    whl=$(ls "$dir/$dist-$ver-"*.whl | head -n1)
  fi
  printf '%s\n' "$whl"
}

unpack_static() {  # unpack_static WHEEL PREFIX DEST: DEST gets the contents of PREFIX/
  local whl=$1 prefix=$2 dest=$3 tmp="$3.tmp"
  [[ -d $dest ]] && return 0
  rm -rf "$tmp"
  unzip -q -o "$whl" "$prefix/*" -d "$tmp"
  [[ -d $tmp/$prefix ]] || die "$whl has no $prefix/"
  mv "$tmp/$prefix" "$dest"
  rm -rf "$tmp"
}

copy_small_subset() {  # copy_small_subset SRC DEST: files in sorted path order, skipping
  # files over 1 MiB, until SMALL_MB is reached (same rule for both versions)
  local src=$1 dest=$2 limit=$((SMALL_MB * 1048576))
  [[ -d $dest ]] && return 0
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  (cd "$src" && find . -type f -printf '%s %P\n' | sort -k2 |
    awk -v lim="$limit" '$1 <= 1048576 && tot < lim { tot += $1; sub(/^[0-9]+ /, ""); print }' |
    tar -cf - --no-recursion -T - | tar -xf - -C "$dest.tmp")
  mv "$dest.tmp" "$dest"
}

make_zips() {  # make_zips TREE NAME: $WORK/pkg/NAME.stored.zip and NAME.deflated.zip
  local tree=$1 name=$2 out="$WORK/pkg"
  mkdir -p "$out"
  find "$tree" -exec touch -h -d "$FIXED_MTIME" {} +
  if [[ ! -f $out/$name.stored.zip ]]; then
    (cd "$tree" && find . -type f | sort | zip -0 -X -q -@ "$out/$name.stored.zip.tmp")
    mv "$out/$name.stored.zip.tmp" "$out/$name.stored.zip"
  fi
  if [[ ! -f $out/$name.deflated.zip ]]; then
    (cd "$tree" && find . -type f | sort | zip -9 -X -q -@ "$out/$name.deflated.zip.tmp")
    mv "$out/$name.deflated.zip.tmp" "$out/$name.deflated.zip"
  fi
}

make_patch() {  # make_patch OLD NEW PATCH (Debian bsdiff, the reference)
  [[ -f $3 ]] && return 0
  log "bsdiff $(basename "$1") $(basename "$2") (slow: ~1 s per MB)"
  bsdiff "$1" "$2" "$3.tmp"
  mv "$3.tmp" "$3"
}

# Cases: NAME OLD NEW PATCH, filled by prepare.
declare -A CASE_OLD=() CASE_NEW=() CASE_PATCH=() CASE_TREE=()
PATCH_CASES=(small medium medium-deflated large)
EXTRACT_CASES=(stored deflated)
PREPARED=0

prepare() {
  (( PREPARED )) && return 0
  need pip python3-pip; need bsdiff; need bspatch bsdiff; need zip; need unzip; need tar
  [[ -x /usr/bin/time ]] || die "missing /usr/bin/time (apt-get install time)"
  log "prepare: streamlit $STREAMLIT_V1 -> $STREAMLIT_V2, bokeh $BOKEH_V1 -> $BOKEH_V2 in $WORK"
  mkdir -p "$WORK/tree" "$WORK/pkg" "$WORK/patch" "$WORK/out"
  local t="$WORK/tree" p="$WORK/pkg" d="$WORK/patch" side sv bv

  for side in a b; do
    [[ $side == a ]] && { sv=$STREAMLIT_V1; bv=$BOKEH_V1; } || { sv=$STREAMLIT_V2; bv=$BOKEH_V2; }
    unpack_static "$(fetch_wheel streamlit "$sv")" streamlit/static "$t/streamlit-$sv"
    unpack_static "$(fetch_wheel bokeh "$bv")" bokeh/server/static "$t/bokeh-$bv"
    # medium: the streamlit front end as is
    [[ -e $t/medium-$side ]] || ln -sfn "streamlit-$sv" "$t/medium-$side"
    # small: a ~SMALL_MB subset of it
    copy_small_subset "$t/streamlit-$sv" "$t/small-$side"
    # large: streamlit + bokeh front ends side by side (~45 MB)
    if [[ ! -d $t/large-$side ]]; then
      mkdir -p "$t/large-$side.tmp"
      cp -a "$t/streamlit-$sv" "$t/large-$side.tmp/streamlit"
      cp -a "$t/bokeh-$bv" "$t/large-$side.tmp/bokeh"
      mv "$t/large-$side.tmp" "$t/large-$side"
    fi
    make_zips "$t/medium-$side/" "medium-$side"
    make_zips "$t/small-$side" "small-$side"
    make_zips "$t/large-$side" "large-$side"
  done

  local c kind
  for c in small medium large; do
    CASE_OLD[$c]="$p/$c-a.stored.zip"; CASE_NEW[$c]="$p/$c-b.stored.zip"
    CASE_PATCH[$c]="$d/$c.stored.bsdiff"
  done
  CASE_OLD[medium-deflated]="$p/medium-a.deflated.zip"; CASE_NEW[medium-deflated]="$p/medium-b.deflated.zip"
  CASE_PATCH[medium-deflated]="$d/medium.deflated.bsdiff"
  for c in "${PATCH_CASES[@]}"; do make_patch "${CASE_OLD[$c]}" "${CASE_NEW[$c]}" "${CASE_PATCH[$c]}"; done
  for kind in stored deflated; do
    CASE_NEW[x-$kind]="$p/medium-b.$kind.zip"; CASE_TREE[x-$kind]="$t/medium-b/"
  done

  log "packages"
  printf '%-16s %9s %9s %9s %7s\n' case old new patch patch%
  for c in "${PATCH_CASES[@]}"; do
    printf '%-16s %9s %9s %9s %6s%%\n' "$c" "$(size_h "${CASE_OLD[$c]}")" "$(size_h "${CASE_NEW[$c]}")" \
      "$(size_h "${CASE_PATCH[$c]}")" \
      "$(fmt1 "$(calc "100 * $(stat -c %s "${CASE_PATCH[$c]}") / $(stat -c %s "${CASE_NEW[$c]}")")")"
    summary "pkg.$c.new_mb" "$(size_mb "${CASE_NEW[$c]}")"
    summary "pkg.$c.patch_kb" "$(awk -v b="$(stat -c %s "${CASE_PATCH[$c]}")" 'BEGIN { printf "%.0f", b / 1024 }')"
  done
  PREPARED=1
}

# --------------------------------------------------------------------------
# baseline: the Swift runtime + Foundation + argument parsing, doing nothing
# --------------------------------------------------------------------------
BASELINE_KB=""
baseline() {
  [[ -n $BASELINE_KB ]] && return 0
  local i rss=() wall=()
  measure "$OURS" --version   # warm-up
  for ((i = 0; i < RUNS; i++)); do measure "$OURS" --version; rss+=("$M_RSS_KB"); wall+=("$M_WALL"); done
  BASELINE_KB=$(median "${rss[@]}")
  log "baseline: $OURS --version: peak RSS $(mb "$BASELINE_KB") MB, wall $(fmt3 "$(median "${wall[@]}")") s"
  summary baseline.rss_mb "$(mb "$BASELINE_KB")"
  summary baseline.time_s "$(fmt3 "$(median "${wall[@]}")")"
}

# alternate REF_FN OURS_FN ARGS...: RUNS timed runs of each, interleaved, the order
# flipping every round (ref,ours / ours,ref) so cache and clock drift hit both
# alike.  Each *_FN ARGS... runs one `measure`.  Results: A_RT A_RM (ref wall s,
# peak KiB) and A_OT A_OM (ours).
A_RT=() A_RM=() A_OT=() A_OM=()
alternate() {
  local ref=$1 ours=$2 i; shift 2
  A_RT=() A_RM=() A_OT=() A_OM=()
  for ((i = 0; i < RUNS; i++)); do
    if (( i % 2 == 0 )); then
      "$ref" "$@"; A_RT+=("$M_WALL"); A_RM+=("$M_RSS_KB")
      "$ours" "$@"; A_OT+=("$M_WALL"); A_OM+=("$M_RSS_KB")
    else
      "$ours" "$@"; A_OT+=("$M_WALL"); A_OM+=("$M_RSS_KB")
      "$ref" "$@"; A_RT+=("$M_WALL"); A_RM+=("$M_RSS_KB")
    fi
  done
}

max() { printf '%s\n' "$@" | sort -g | tail -n1; }
min() { printf '%s\n' "$@" | sort -g | head -n1; }

# raw per-run numbers, for VERBOSE=1
raw() {  # raw LABEL REF_NAME
  [[ ${VERBOSE:-0} == 1 ]] || return 0
  printf '    %-12s %s s: %s\n' "$1" "$2" "${A_RT[*]}" >&2
  printf '    %-12s ours s: %s\n' "$1" "${A_OT[*]}" >&2
  printf '    %-12s %s KiB: %s | ours KiB: %s\n' "$1" "$2" "${A_RM[*]}" "${A_OM[*]}" >&2
}

# print_row CASE SIZE_MB REF_S OURS_S REF_KB OURS_KB REF_MIN_S OURS_MIN_S -> table row;
# sets ROW_RATIO (of medians), ROW_RATIO_MIN (of best runs), ROW_ADDED (MiB over baseline)
ROW_RATIO=0 ROW_RATIO_MIN=0 ROW_ADDED=0
TABLE_FMT='%-16s %8s | %10s %10s | %10s %10s %10s | %6s %9s\n'
print_row() {
  ROW_RATIO=$(calc "$4 / $3")
  ROW_RATIO_MIN=$(calc "$8 / $7")
  ROW_ADDED=$(calc "($6 - $BASELINE_KB) / 1024")
  printf "$TABLE_FMT" "$1" "$2" "$(fmt3 "$3")" "$(fmt3 "$4")" "$(mb "$5")" "$(mb "$6")" \
    "$(fmt2 "$ROW_ADDED")" "$(fmt2 "$ROW_RATIO")" "$(fmt2 "$ROW_RATIO_MIN")"
}

# --------------------------------------------------------------------------
# section: patch
# --------------------------------------------------------------------------
P_REF_OUT="" P_OUR_OUT=""
run_bspatch() { rm -f "$P_REF_OUT"; settle; measure bspatch "$1" "$P_REF_OUT" "$2"; }    # OLD PATCH
run_ours_patch() { rm -f "$P_OUR_OUT"; settle; measure "$OURS" patch "$1" "$2" "$P_OUR_OUT"; }

section_patch() {
  prepare; baseline
  log "patch: bspatch OLD NEW PATCH  vs  $(basename "$OURS") patch OLD PATCH NEW  ($RUNS runs each, alternating)"
  local c old new pat
  local -A R_T=() R_M=() O_T=() O_M=() R_MIN=() O_MIN=()
  P_REF_OUT="$WORK/out/patched.bspatch.zip" P_OUR_OUT="$WORK/out/patched.ours.zip"
  for c in "${PATCH_CASES[@]}"; do
    old=${CASE_OLD[$c]} new=${CASE_NEW[$c]} pat=${CASE_PATCH[$c]}
    # untimed warm-up (page cache) + correctness
    run_bspatch "$old" "$pat"; cmp -s "$P_REF_OUT" "$new" || die "$c: bspatch output differs from $new"
    run_ours_patch "$old" "$pat"; cmp "$P_OUR_OUT" "$new" >&2 || die "$c: our output differs from $new"
    alternate run_bspatch run_ours_patch "$old" "$pat"
    cmp "$P_OUR_OUT" "$new" >&2 || die "$c: our output (last timed run) differs from $new"
    cmp -s "$P_REF_OUT" "$new" || die "$c: bspatch output (last timed run) differs from $new"
    R_T[$c]=$(median "${A_RT[@]}") R_M[$c]=$(median "${A_RM[@]}")
    O_T[$c]=$(median "${A_OT[@]}") O_M[$c]=$(max "${A_OM[@]}")
    R_MIN[$c]=$(min "${A_RT[@]}") O_MIN[$c]=$(min "${A_OT[@]}")
    raw "$c" bspatch
    printf '  %-16s bspatch %s s  ours %s s   (identical output)\n' "$c" "$(fmt3 "${R_T[$c]}")" "$(fmt3 "${O_T[$c]}")" >&2
  done
  rm -f "$P_REF_OUT" "$P_OUR_OUT"

  echo
  echo "patch: median wall time (s), peak RSS (MiB; ours = max over runs), added = ours - baseline ($(mb "$BASELINE_KB") MiB),"
  echo "ratio = ours/bspatch of the medians, ratio_min = of the best runs"
  printf "$TABLE_FMT" case new_MB bspatch_s ours_s bspatch_MB ours_MB added_MB ratio ratio_min
  local ratios=()
  for c in "${PATCH_CASES[@]}"; do
    print_row "$c" "$(size_mb "${CASE_NEW[$c]}")" "${R_T[$c]}" "${O_T[$c]}" "${R_M[$c]}" "${O_M[$c]}" \
      "${R_MIN[$c]}" "${O_MIN[$c]}"
    ratios+=("$ROW_RATIO")
    summary "patch.$c.time_ratio" "$(fmt2 "$ROW_RATIO")"
    summary "patch.$c.time_ratio_min" "$(fmt2 "$ROW_RATIO_MIN")"
    summary "patch.$c.ours_s" "$(fmt3 "${O_T[$c]}")"
    summary "patch.$c.bspatch_s" "$(fmt3 "${R_T[$c]}")"
    summary "patch.$c.ours_rss_mb" "$(mb "${O_M[$c]}")"
    summary "patch.$c.added_rss_mb" "$(fmt2 "$ROW_ADDED")"
    summary "patch.$c.bspatch_rss_mb" "$(mb "${R_M[$c]}")"
  done
  local worst geo flat
  worst=$(max "${ratios[@]}")
  geo=$(printf '%s\n' "${ratios[@]}" | awk '{ s += log($1) } END { printf "%.6g", exp(s / NR) }')
  flat=$(calc "(${O_M[large]} - ${O_M[small]}) / 1024"); flat=${flat#-}
  summary patch.time_ratio "$(fmt2 "$worst")"
  summary patch.time_ratio_geomean "$(fmt2 "$geo")"
  summary patch.rss_mb.small "$(mb "${O_M[small]}")"
  summary patch.rss_mb.large "$(mb "${O_M[large]}")"
  summary patch.rss_flat_delta_mb "$(fmt2 "$flat")"
  summary patch.added_rss_mb.small "$(fmt2 "$(calc "(${O_M[small]} - $BASELINE_KB) / 1024")")"
  summary patch.added_rss_mb.large "$(fmt2 "$(calc "(${O_M[large]} - $BASELINE_KB) / 1024")")"
  summary patch.bspatch_rss_mb.small "$(mb "${R_M[small]}")"
  summary patch.bspatch_rss_mb.large "$(mb "${R_M[large]}")"
  check patch.time_ratio "$(fmt2 "$worst")" '<=' "$T_PATCH_TIME" "ours/bspatch wall time, worst case"
  check patch.rss_mb.small "$(mb "${O_M[small]}")" '<=' "$T_PATCH_RSS_MB" "our peak RSS, small package"
  check patch.rss_mb.large "$(mb "${O_M[large]}")" '<=' "$T_PATCH_RSS_MB" "our peak RSS, large package"
  check patch.rss_flat_delta_mb "$(fmt2 "$flat")" '<=' "$T_PATCH_FLAT_MB" "|RSS large - RSS small|"
}

# --------------------------------------------------------------------------
# section: extract
# --------------------------------------------------------------------------
X_REF_DIR="" X_OUR_DIR=""
run_unzip() { rm -rf "$X_REF_DIR"; settle; measure unzip -q -o "$1" -d "$X_REF_DIR"; }   # ZIP
run_ours_extract() { rm -rf "$X_OUR_DIR"; settle; measure "$OURS" extract "$1" "$X_OUR_DIR"; }

section_extract() {
  prepare; baseline
  log "extract: unzip -q -o ZIP -d DIR  vs  $(basename "$OURS") extract ZIP DIR  ($RUNS runs each, alternating)"
  local k zip tree
  local -A R_T=() R_M=() O_T=() O_M=() R_MIN=() O_MIN=()
  X_REF_DIR="$WORK/out/x-unzip" X_OUR_DIR="$WORK/out/x-ours"
  for k in "${EXTRACT_CASES[@]}"; do
    zip=${CASE_NEW[x-$k]} tree=${CASE_TREE[x-$k]}
    run_unzip "$zip"; diff -r "$tree" "$X_REF_DIR" >/dev/null || die "extract $k: unzip's tree differs from $tree"
    run_ours_extract "$zip"; diff -r "$tree" "$X_OUR_DIR" >&2 || die "extract $k: our tree differs from $tree"
    alternate run_unzip run_ours_extract "$zip"
    diff -r "$X_REF_DIR" "$X_OUR_DIR" >&2 || die "extract $k: trees differ (unzip vs ours, last timed run)"
    R_T[$k]=$(median "${A_RT[@]}") R_M[$k]=$(median "${A_RM[@]}")
    O_T[$k]=$(median "${A_OT[@]}") O_M[$k]=$(max "${A_OM[@]}")
    R_MIN[$k]=$(min "${A_RT[@]}") O_MIN[$k]=$(min "${A_OT[@]}")
    raw "$k" unzip
    printf '  %-16s unzip %s s  ours %s s   (identical trees)\n' "$k" "$(fmt3 "${R_T[$k]}")" "$(fmt3 "${O_T[$k]}")" >&2
  done
  rm -rf "$X_REF_DIR" "$X_OUR_DIR"

  echo
  echo "extract ($(find "${CASE_TREE[x-stored]}" -type f | wc -l) files): median wall time (s), peak RSS (MiB; ours = max over runs), added = ours - baseline,"
  echo "ratio = ours/unzip of the medians, ratio_min = of the best runs"
  printf "$TABLE_FMT" case zip_MB unzip_s ours_s unzip_MB ours_MB added_MB ratio ratio_min
  local ratios=() rsss=()
  for k in "${EXTRACT_CASES[@]}"; do
    print_row "$k" "$(size_mb "${CASE_NEW[x-$k]}")" "${R_T[$k]}" "${O_T[$k]}" "${R_M[$k]}" "${O_M[$k]}" \
      "${R_MIN[$k]}" "${O_MIN[$k]}"
    ratios+=("$ROW_RATIO"); rsss+=("${O_M[$k]}")
    summary "extract.$k.time_ratio" "$(fmt2 "$ROW_RATIO")"
    summary "extract.$k.time_ratio_min" "$(fmt2 "$ROW_RATIO_MIN")"
    summary "extract.$k.ours_s" "$(fmt3 "${O_T[$k]}")"
    summary "extract.$k.unzip_s" "$(fmt3 "${R_T[$k]}")"
    summary "extract.$k.ours_rss_mb" "$(mb "${O_M[$k]}")"
    summary "extract.$k.added_rss_mb" "$(fmt2 "$ROW_ADDED")"
    summary "extract.$k.unzip_rss_mb" "$(mb "${R_M[$k]}")"
  done
  local worst rss
  worst=$(max "${ratios[@]}"); rss=$(max "${rsss[@]}")
  summary extract.time_ratio "$(fmt2 "$worst")"
  summary extract.rss_mb "$(mb "$rss")"
  check extract.time_ratio "$(fmt2 "$worst")" '<=' "$T_EXTRACT_TIME" "ours/unzip wall time, worst case"
  check extract.rss_mb "$(mb "$rss")" '<=' "$T_EXTRACT_RSS_MB" "our peak RSS, worst case"
}

# --------------------------------------------------------------------------
# section: sync — a patch update end to end through `offline-agent sync` (manifest,
# download, bspatch, sha256, extraction, fsyncs, atomic swap) against the unsafe
# by-hand chain curl + bspatch + sha256sum + unzip on the same files, both fetching
# from one nginx on 127.0.0.1. (The throttled no-op is in `footprint`.)
# --------------------------------------------------------------------------
T_SYNC_TIME=1.2         # ours/(curl+bspatch+sha256sum+unzip) wall time
T_SYNC_RSS_MB=48        # our peak RSS
S_DIR="" S_URL=""

sync_start_nginx() {
  need nginx nginx-light; need curl
  local port=$(( 20000 + RANDOM % 20000 ))
  mkdir -p "$S_DIR/nginx"
  cat > "$S_DIR/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $S_DIR/nginx/nginx.pid;
error_log $S_DIR/nginx/error.log;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  default_type application/octet-stream;
  types { application/json json; }
  client_body_temp_path $S_DIR/nginx; proxy_temp_path $S_DIR/nginx; fastcgi_temp_path $S_DIR/nginx;
  uwsgi_temp_path $S_DIR/nginx; scgi_temp_path $S_DIR/nginx;
  server { listen 127.0.0.1:$port; root $S_DIR/www; }
}
CONF
  nginx -c "$S_DIR/nginx/nginx.conf" -p "$S_DIR/nginx" &
  S_NGINX=$!
  S_URL="http://127.0.0.1:$port"
  local i
  for ((i = 0; i < 100; i++)); do curl -s -o /dev/null "$S_URL/" && return 0; sleep 0.05; done
  die "nginx did not start (see $S_DIR/nginx/error.log)"
}

sync_manifest() {  # sync_manifest OUT VERSION ISPATCH URL FILE [BASE]
  local out=$1 version=$2 is_patch=$3 url=$4 file=$5 base=${6:-}
  local new="$S_DIR/www/new.zip" sha size pkg
  sha=$(sha256sum "$file" | cut -d' ' -f1); size=$(stat -c %s "$file")
  if [[ $is_patch == true ]]; then
    pkg=$(sha256sum "$new" | cut -d' ' -f1)
    printf '{"app":"bench","version":"%s","miniVersion":"1.0.0","isPatch":true,"baseVersion":"%s","url":"%s","size":%s,"sha256":"%s","packageSha256":"%s","fullUrl":"new.zip","fullSize":%s,"whitelist":["https://bench.example.com/"]}\n' \
      "$version" "$base" "$url" "$size" "$sha" "$pkg" "$(stat -c %s "$new")" > "$out"
  else
    printf '{"app":"bench","version":"%s","miniVersion":"1.0.0","isPatch":false,"url":"%s","size":%s,"sha256":"%s","packageSha256":"%s","whitelist":["https://bench.example.com/"]}\n' \
      "$version" "$url" "$size" "$sha" "$sha" > "$out"
  fi
}

run_chain() {  # the by-hand chain: no signature, no size cap, no atomic swap, no fsync
  rm -rf "$S_DIR/chain"; mkdir -p "$S_DIR/chain"; settle
  measure bash -c "cd '$S_DIR/chain' && curl -sf -o p.bsdiff '$S_URL/p.bsdiff' && bspatch '$S_DIR/installed.zip' new.zip p.bsdiff \
    && sha256sum new.zip >/dev/null && unzip -q -o new.zip -d out"
}
run_ours_sync() {
  rm -rf "$S_DIR/root"; cp -a "$S_DIR/base" "$S_DIR/root"; settle
  measure "$OURS" sync --root "$S_DIR/root" --app bench --manifest "$S_URL/patch.json" --force --allow-unsigned
  [[ -n $(find "$S_DIR/root/apps/bench/versions" -maxdepth 1 -name 2.0.0) ]] || die "sync did not install 2.0.0"
}

section_sync() {
  prepare; baseline
  need sha256sum coreutils
  S_DIR="$WORK/sync"; rm -rf "$S_DIR"; mkdir -p "$S_DIR/www"
  local c=large
  cp "${CASE_OLD[$c]}" "$S_DIR/www/old.zip"; cp "${CASE_NEW[$c]}" "$S_DIR/www/new.zip"
  cp "${CASE_PATCH[$c]}" "$S_DIR/www/p.bsdiff"; cp "${CASE_OLD[$c]}" "$S_DIR/installed.zip"
  sync_manifest "$S_DIR/www/full.json" 1.0.0 false old.zip "$S_DIR/www/old.zip"
  sync_manifest "$S_DIR/www/patch.json" 2.0.0 true p.bsdiff "$S_DIR/www/p.bsdiff" 1.0.0
  sync_start_nginx
  trap 'kill $S_NGINX 2>/dev/null || true' EXIT
  log "sync: installing 1.0.0 ($(size_h "$S_DIR/www/old.zip")) as the base; patch $(size_h "$S_DIR/www/p.bsdiff") to 2.0.0"
  "$OURS" sync --root "$S_DIR/base" --app bench --manifest "$S_URL/full.json" --force --allow-unsigned >/dev/null 2>&1 \
    || die "base install failed"
  run_chain; run_ours_sync   # warm-up
  alternate run_chain run_ours_sync
  local rt ot rm om
  rt=$(median "${A_RT[@]}"); ot=$(median "${A_OT[@]}"); rm=$(median "${A_RM[@]}"); om=$(max "${A_OM[@]}")
  raw sync chain
  echo
  echo "sync: a patch update of the large package, end to end (median wall s, peak RSS MiB; ours = max over runs)"
  printf "$TABLE_FMT" case zip_MB chain_s ours_s chain_MB ours_MB added_MB ratio ratio_min
  print_row patch-update "$(size_mb "$S_DIR/www/new.zip")" "$rt" "$ot" "$rm" "$om" "$(min "${A_RT[@]}")" "$(min "${A_OT[@]}")"
  summary sync.time_ratio "$(fmt2 "$ROW_RATIO")"
  summary sync.ours_s "$(fmt3 "$ot")"
  summary sync.chain_s "$(fmt3 "$rt")"
  summary sync.rss_mb "$(mb "$om")"
  check sync.time_ratio "$(fmt2 "$ROW_RATIO")" '<=' "$T_SYNC_TIME" "sync/(curl+bspatch+sha256sum+unzip) wall time"
  check sync.rss_mb "$(mb "$om")" '<=' "$T_SYNC_RSS_MB" "sync peak RSS"

  kill "$S_NGINX" 2>/dev/null || true
}

# --------------------------------------------------------------------------
# section: footprint — what every device pays: the binary's size (and no ICU in it),
# the throttled no-op `sync` cron runs most of the time, and `serve`'s idle RSS.
# Needs no prepare: the sample app from fixtures/, installed from nginx on 127.0.0.1.
# --------------------------------------------------------------------------
section_footprint() {
  need zip; need strings binutils
  local dir="$WORK/footprint" size icu
  S_DIR=$dir; rm -rf "$dir"; mkdir -p "$dir/www"
  size=$(stat -c %s "$OURS")
  icu=$(strings -n 6 "$OURS" | grep -c icudt || true)
  printf 'footprint: %s is %s MiB (target <= %s MB), %s "icudt" strings (ICU data)\n' \
    "$(basename "$OURS")" "$(size_mb "$OURS")" "$T_SIZE_MB" "$icu"
  summary footprint.binary_mb "$(size_mb "$OURS")"
  summary footprint.icu_strings "$icu"
  check footprint.binary_mb "$(size_mb "$OURS")" '<=' "$T_SIZE_MB" "stripped static device binary (MiB)"
  check footprint.icu_strings "$icu" '<=' 0 "'icudt' strings in the device binary"

  (cd "$ROOT/fixtures/sample-app/1.0.0" && find . -type f | sort | zip -X -q -@ "$dir/www/app.zip")
  sync_manifest "$dir/www/app.json" 1.0.0 false app.zip "$dir/www/app.zip"
  sync_start_nginx
  trap 'kill $S_NGINX 2>/dev/null || true' EXIT
  local sync_cmd=("$OURS" sync --root "$dir/root" --app bench --manifest "$S_URL/app.json" --allow-unsigned)
  "${sync_cmd[@]}" --force >/dev/null 2>&1 || die "footprint: installing the sample app failed"
  # Now throttled: each run reads the root's state, decides "not yet" and exits 0.
  "${sync_cmd[@]}" >/dev/null 2>&1 || die "footprint: throttled sync failed"
  local runs=$((RUNS * 20)) noop_ms i walls=() t0 t1
  if command -v hyperfine >/dev/null 2>&1; then
    # -N: no shell in between, so the figure is the process alone.
    hyperfine -N -w 5 -r "$runs" --export-json "$dir/noop.json" -- "${sync_cmd[*]}" >&2
    noop_ms=$(python3 -c 'import json, sys; print(1000 * json.load(open(sys.argv[1]))["results"][0]["median"])' "$dir/noop.json")
  else
    for ((i = 0; i < runs; i++)); do
      t0=$EPOCHREALTIME; "${sync_cmd[@]}" >/dev/null 2>&1; t1=$EPOCHREALTIME
      walls+=("$(calc "1000 * ($t1 - $t0)")")
    done
    noop_ms=$(median "${walls[@]}")
  fi
  measure "${sync_cmd[@]}"
  printf 'footprint: throttled no-op sync  median %s ms over %d runs (target <= %s ms), peak RSS %s MiB\n' \
    "$(fmt2 "$noop_ms")" "$runs" "$T_NOOP_MS" "$(mb "$M_RSS_KB")"
  summary footprint.noop_sync_ms "$(fmt2 "$noop_ms")"
  summary footprint.noop_sync_rss_mb "$(mb "$M_RSS_KB")"
  check footprint.noop_sync_ms "$(fmt2 "$noop_ms")" '<=' "$T_NOOP_MS" "throttled no-op sync wall time, median"

  # serve: RSS once it listens and has answered one request, started the way a device
  # starts it after boot: with the binary out of the page cache (dd's nocache drops it).
  # Clean pages come back from disk through readahead then, instead of in whatever
  # (often larger) pieces the linker's and strip's writes left in the cache, which made
  # the figure swing by 2-3 MiB from one build to the next. Median of 3 starts.
  local round port rss_kb anon_kb file_kb threads samples=()
  for round in 1 2 3; do
    dd if="$OURS" iflag=nocache count=0 status=none
    : > "$dir/serve.out"
    "$OURS" serve --root "$dir/root" --port 0 > "$dir/serve.out" 2> "$dir/serve.err" &
    local serve_pid=$!
    port=""
    for ((i = 0; i < 100; i++)); do
      port=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$dir/serve.out")
      [[ -n $port ]] && break
      sleep 0.05
    done
    [[ -n $port ]] || { kill "$serve_pid"; die "footprint: serve did not start: $(cat "$dir/serve.err")"; }
    curl -sf -o /dev/null "http://127.0.0.1:$port/bench/index.html" || { kill "$serve_pid"; die "footprint: serve did not answer"; }
    sleep 0.5
    # Where it goes: heap and stacks (anonymous) vs the binary's own pages (file), and the
    # threads whose stacks and malloc arenas count in the first.
    samples+=("$(awk '/^(VmRSS|RssAnon|RssFile|Threads):/ { printf "%s ", $2 }' "/proc/$serve_pid/status")")
    kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
  done
  read -r rss_kb anon_kb file_kb threads < <(printf '%s\n' "${samples[@]}" | sort -n | sed -n 2p)
  [[ ${VERBOSE:-0} == 1 ]] && printf 'footprint: serve starts (VmRSS RssAnon RssFile Threads, kB): %s\n' "${samples[*]}" >&2
  printf 'footprint: serve idle RSS %s MiB after startup and one request (target <= %s MB): %s MiB anonymous, %s MiB file, %s threads\n' \
    "$(mb "$rss_kb")" "$T_SERVE_RSS_MB" "$(mb "$anon_kb")" "$(mb "$file_kb")" "$threads"
  summary footprint.serve_idle_rss_mb "$(mb "$rss_kb")"
  summary footprint.serve_idle_anon_mb "$(mb "$anon_kb")"
  summary footprint.serve_idle_file_mb "$(mb "$file_kb")"
  summary footprint.serve_threads "$threads"
  check footprint.serve_idle_rss_mb "$(mb "$rss_kb")" '<=' "$T_SERVE_RSS_MB" "serve VmRSS, idle after one request"
  kill "$S_NGINX" 2>/dev/null || true
}

# --------------------------------------------------------------------------
# section: report — offline-server's POST /report ingestion rate: wrk (2 threads,
# REPORT_CONNECTIONS connections, REPORT_SECONDS) posting batches of REPORT_EVENTS
# events with unique ids (bench/report.lua) to a release offline-server on a fresh
# database, on loopback. Needs no prepare and not the device binary; not run by `all`.
# --------------------------------------------------------------------------
SERVER=${SERVER:-$ROOT/.build/release/offline-server}
REPORT_SECONDS=${REPORT_SECONDS:-10}
REPORT_CONNECTIONS=${REPORT_CONNECTIONS:-16}
REPORT_EVENTS=${REPORT_EVENTS:-50}
R_PID=""   # the server under test (global: the EXIT trap outlives the function)

section_report() {
  need wrk; need curl
  if [[ $BUILD != 0 && $SERVER == "$ROOT/.build/release/offline-server" ]]; then
    log "build: scripts/build-release.sh offline-server"
    "$ROOT/scripts/build-release.sh" offline-server >&2
  fi
  [[ -x $SERVER ]] || die "SERVER=$SERVER is not an executable"
  local dir="$WORK/report" i port="" out stats stored
  rm -rf "$dir"; mkdir -p "$dir/publish"
  "$SERVER" --dir "$dir/publish" --port 0 --open-collector --reports-db "$dir/reports.sqlite" --log-level warning \
    > "$dir/server.out" 2> "$dir/server.err" &
  R_PID=$!
  trap 'kill $R_PID 2>/dev/null || true' EXIT
  for ((i = 0; i < 100; i++)); do
    port=$(sed -n 's|^listening on 127\.0\.0\.1:\([0-9]*\)$|\1|p' "$dir/server.out")
    [[ -n $port ]] && break
    sleep 0.05
  done
  [[ -n $port ]] || die "report: offline-server did not start: $(cat "$dir/server.err")"
  log "report: wrk -t2 -c$REPORT_CONNECTIONS -d${REPORT_SECONDS}s, $REPORT_EVENTS events a batch, offline-server on 127.0.0.1:$port"
  # Warm-up (connections, SQLite pages), on ids of their own.
  RUN_ID=warm EVENTS=$REPORT_EVENTS wrk -t2 -c"$REPORT_CONNECTIONS" -d2s -s "$ROOT/bench/report.lua" \
    "http://127.0.0.1:$port/report" > "$dir/warm.txt"
  out=$(RUN_ID=run EVENTS=$REPORT_EVENTS wrk -t2 -c"$REPORT_CONNECTIONS" -d"${REPORT_SECONDS}s" --latency \
    -s "$ROOT/bench/report.lua" "http://127.0.0.1:$port/report")
  [[ ${VERBOSE:-0} == 1 ]] && printf '%s\n' "$out" >&2
  local line requests duration p50 p99 errors
  line=$(grep '^REPORT ' <<<"$out") || die "report: no REPORT line from wrk: $out"
  requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$line")
  duration=$(sed -n 's/.* duration_us=\([0-9]*\).*/\1/p' <<<"$line")
  p50=$(sed -n 's/.* p50_us=\([0-9]*\).*/\1/p' <<<"$line")
  p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
  errors=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$line")
  (( errors == 0 )) || die "report: $errors requests failed or were refused"
  # Every event of every answered request must be stored (the warm-up's too).
  stats=$(curl -sf "http://127.0.0.1:$port/stats?app=bench") || die "report: /stats failed"
  stored=$(grep -o '"events":[0-9]*' <<<"$stats" | head -n1 | cut -d: -f2)
  local warm sent
  warm=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' "$dir/warm.txt")
  sent=$(( (warm + requests) * REPORT_EVENTS ))
  (( ${stored:-0} >= sent )) || die "report: $sent events answered 200 but only ${stored:-0} stored"
  kill "$R_PID"; wait "$R_PID" 2>/dev/null || true
  local events_s requests_s
  requests_s=$(calc "$requests / ($duration / 1000000)")
  events_s=$(calc "$requests * $REPORT_EVENTS / ($duration / 1000000)")
  echo
  echo "report: POST /report, $REPORT_EVENTS events a batch, wrk -t2 -c$REPORT_CONNECTIONS -d${REPORT_SECONDS}s on loopback ($(nproc) CPUs)"
  printf '  %s requests/s, %s events/s, latency p50 %s ms, p99 %s ms; %s events stored in all\n' \
    "$(fmt1 "$requests_s")" "$(fmt1 "$events_s")" "$(fmt2 "$(calc "$p50 / 1000")")" "$(fmt2 "$(calc "$p99 / 1000")")" "${stored:-?}"
  summary report.events_per_s "$(fmt1 "$events_s")"
  summary report.requests_per_s "$(fmt1 "$requests_s")"
  summary report.p99_ms "$(fmt2 "$(calc "$p99 / 1000")")"
  check report.events_per_s "$(fmt1 "$events_s")" '>=' "$T_REPORT_EVENTS_S" "POST /report events/s, batches of $REPORT_EVENTS"
}

# --------------------------------------------------------------------------
# manifest: manifest requests per second, nginx (static manifest.json) vs offline-server
# (its static /<app>/manifest.json and its dynamic /manifest?app=&current=) over the same
# publish directory; wrk, interleaved rounds, medians.  Needs no offline-agent build.
# --------------------------------------------------------------------------
SERVER=${SERVER:-$ROOT/.build/release/offline-server}
M_THREADS=${M_THREADS:-2} M_CONNECTIONS=${M_CONNECTIONS:-50} M_DURATION=${M_DURATION:-10s} M_ROUNDS=${M_ROUNDS:-3}

# manifest_wrk URL -> "req/s p99_ms"; any non-2xx/3xx answer or socket error aborts.
manifest_wrk() {
  local rps p99 errors
  read -r rps p99 errors < <(wrk_figures "$M_DIR/wrk.log" -t"$M_THREADS" -c"$M_CONNECTIONS" -d"$M_DURATION" "$1")
  [[ $errors == - ]] || die "manifest: wrk reported errors for $1: $errors (see $M_DIR/wrk.log)"
  echo "$rps $p99"
}

section_manifest() {
  need wrk; need nginx nginx-light; need curl
  if [[ ! -x $SERVER ]]; then
    log "build: scripts/build-release.sh offline-server"
    "$ROOT/scripts/build-release.sh" offline-server >&2
  fi
  [[ -x $SERVER ]] || die "SERVER=$SERVER is not an executable"
  local publisher="" p
  for p in "$(dirname "$SERVER")/offline-publish" "$ROOT/.build/release/offline-publish" "$ROOT/.build/debug/offline-publish"; do
    [[ -x $p ]] && { publisher=$p; break; }
  done
  if [[ -z $publisher ]]; then
    "$ROOT/scripts/build-release.sh" offline-publish >&2
    publisher="$ROOT/.build/release/offline-publish"
  fi
  M_DIR="$WORK/manifest"
  rm -rf "$M_DIR"; mkdir -p "$M_DIR"
  # Two signed versions of the sample app: the dynamic manifest of 1.0.0 offers the patch.
  "$publisher" keygen --out "$M_DIR/key" >/dev/null
  local v
  for v in 1.0.0 1.1.0; do
    "$publisher" publish --app sample --version "$v" --source "$ROOT/fixtures/sample-app/$v" --out "$M_DIR/pub" \
      --key "$M_DIR/key" --whitelist https://h5.example.com/sample/ >/dev/null
  done

  # nginx as a static host would serve the directory (PUBLISHING.md), one worker, no access log.
  S_DIR="$M_DIR"; ln -s "$M_DIR/pub" "$S_DIR/www"
  sync_start_nginx
  local nginx_url=$S_URL
  # offline-server with the same key; request logging off (warning), as in production behind a log shipper.
  # Created first: the background child opens it only after the parent may already read it.
  : > "$M_DIR/server.out"
  "$SERVER" --dir "$M_DIR/pub" --port 0 --key "$M_DIR/key" --log-level warning > "$M_DIR/server.out" 2> "$M_DIR/server.err" &
  local server_pid=$! port="" i
  for ((i = 0; i < 100; i++)); do
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$M_DIR/server.out")
    [[ -n $port ]] && break
    sleep 0.05
  done
  [[ -n $port ]] || { kill "$server_pid" "$S_NGINX"; die "manifest: offline-server did not start: $(cat "$M_DIR/server.err")"; }
  local ours_url="http://127.0.0.1:$port"

  local -a names=(nginx-static ours-static ours-dynamic)
  local -A url=(
    [nginx-static]="$nginx_url/sample/manifest.json"
    [ours-static]="$ours_url/sample/manifest.json"
    [ours-dynamic]="$ours_url/manifest?app=sample&current=1.0.0"
  )
  # The same bytes from both static hosts; the dynamic one is a signed patch manifest.
  cmp -s <(curl -sf "${url[nginx-static]}") "$M_DIR/pub/sample/manifest.json" || die "manifest: nginx serves other bytes"
  cmp -s <(curl -sf "${url[ours-static]}") "$M_DIR/pub/sample/manifest.json" || die "manifest: offline-server serves other bytes"
  curl -sf -D - -o /dev/null "${url[ours-dynamic]}" | grep -qi '^x-offline-signature:' || die "manifest: the dynamic manifest is not signed"

  local name round rps p99
  local -A all_rps all_p99
  for name in "${names[@]}"; do
    log "manifest: $name warm-up 2s"
    wrk -t"$M_THREADS" -c"$M_CONNECTIONS" -d2s "${url[$name]}" > /dev/null
  done
  for ((round = 1; round <= M_ROUNDS; round++)); do
    for name in "${names[@]}"; do
      log "manifest: round $round/$M_ROUNDS $name (wrk -t$M_THREADS -c$M_CONNECTIONS -d$M_DURATION)"
      read -r rps p99 < <(manifest_wrk "${url[$name]}")
      all_rps[$name]+="$rps "; all_p99[$name]+="$p99 "
      [[ ${VERBOSE:-0} == 1 ]] && printf '  %s: %s req/s, p99 %s ms\n' "$name" "$rps" "$p99" >&2
    done
  done
  kill "$server_pid" "$S_NGINX" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true

  local -A med_rps med_p99
  printf '\nmanifest: medians of %d interleaved rounds, wrk -t%s -c%s -d%s, %s cores\n' \
    "$M_ROUNDS" "$M_THREADS" "$M_CONNECTIONS" "$M_DURATION" "$(nproc)"
  printf '%-14s %12s %10s %8s\n' case req/s p99_ms ratio
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086  # word lists
    med_rps[$name]=$(median ${all_rps[$name]}); med_p99[$name]=$(median ${all_p99[$name]})
    printf '%-14s %12.0f %10.2f %8.2f\n' "$name" "${med_rps[$name]}" "${med_p99[$name]}" \
      "$(calc "${med_rps[$name]} / ${med_rps[nginx-static]}")"
    summary "manifest.${name}.rps" "$(fmt1 "${med_rps[$name]}")"
    summary "manifest.${name}.p99_ms" "$(fmt2 "${med_p99[$name]}")"
  done
  summary manifest.ratio_static "$(fmt2 "$(calc "${med_rps[ours-static]} / ${med_rps[nginx-static]}")")"
  summary manifest.ratio_dynamic "$(fmt2 "$(calc "${med_rps[ours-dynamic]} / ${med_rps[nginx-static]}")")"
}

# --------------------------------------------------------------------------
# proxy: forwarding on a mirrored origin vs nginx proxy_pass (bench/proxy.sh; not in `all`)
# --------------------------------------------------------------------------
section_proxy() {
  log "proxy: offline-agent serve forwarding vs nginx proxy_pass (bench/proxy.sh)"
  local out line
  out=$(OURS="$OURS" BUILD=0 "$ROOT/bench/proxy.sh") || true   # exits 1 on a miss; its verdicts say which
  printf '%s\n' "$out"
  while read -r line; do VERDICTS+=("$line"); done < <(printf '%s\n' "$out" | grep '^# \(PASS\|FAIL\) proxy' || true)
  printf '%s\n' "$out" | grep -q '^# \(PASS\|FAIL\) proxy' || VERDICTS+=("# FAIL proxy: bench/proxy.sh did not measure (see its error above)")
}

# --------------------------------------------------------------------------
# engine (issue 40): the install engine against what a careful user would run by hand,
# each section interleaving its tools round by round (the order rotating), medians.
#   archivers: `offline-agent extract` vs bsdtar -xf and 7zz x (the faster of the two);
#   install:   a first install, `sync` into an empty root from nginx, vs curl + the
#              faster of bsdtar and 7zz + `sync -f` on the tree (the same durability);
#   update:    a patch update vs curl + bspatch + sha256sum + unzip; bytes written, RSS.
# Packages: JupyterLab's and Gradio's front ends (pinned wheels), stored and deflated;
# updates: the bench's streamlit and streamlit + bokeh releases, and a small change.
# `engine` runs the three; not part of `all`.
# --------------------------------------------------------------------------
JUPYTERLAB_V=${JUPYTERLAB_V:-4.4.5}
GRADIO_V=${GRADIO_V:-5.38.0}
T_ARCHIVERS=0.8         # offline-agent extract / the faster of bsdtar and 7zz, every package
T_INSTALL=1.0           # first install / the faster by-hand chain with sync -f, every package
T_UPDATE_NEW=0.3        # patch update of a release with most bytes new / curl + bspatch + sha256sum + unzip
T_UPDATE_SMALL=0.2      # the same for a small change
T_UPDATE_WRITTEN=15     # % of the package a small change's update writes
T_UPDATE_RSS_MB=32      # peak RSS of an update
ENGINE_SECTIONS=(archivers install update)
ENGINE_PACKAGES=()      # NAME.KIND, filled by prepare_engine
ENGINE_PREPARED=0
PROBE="$ROOT/bench/probe.py"

prepare_engine() {
  (( ENGINE_PREPARED )) && return 0
  prepare
  need bsdtar libarchive-tools; need 7zz 7zip; need curl; need nginx nginx-light; need sha256sum coreutils
  local t="$WORK/tree" name kind
  unpack_static "$(fetch_wheel jupyterlab "$JUPYTERLAB_V")" jupyterlab/static "$t/jupyterlab-$JUPYTERLAB_V"
  unpack_static "$(fetch_wheel gradio "$GRADIO_V")" gradio/templates/frontend "$t/gradio-$GRADIO_V"
  for name in "jupyterlab-$JUPYTERLAB_V" "gradio-$GRADIO_V"; do
    make_zips "$t/$name" "$name"
    for kind in stored deflated; do ENGINE_PACKAGES+=("$name.$kind"); CASE_TREE[$name.$kind]="$t/$name"; done
  done
  # A small change: the large package's first tree with five small JS files edited
  # (under 1 % of the files, 0.02 % of the bytes).
  if [[ ! -d $t/large-c ]]; then
    rm -rf "$t/large-c.tmp"; cp -a "$t/large-a/" "$t/large-c.tmp"
    (cd "$t/large-c.tmp" && find . -type f -name '*.js' -size -200k | sort | head -5 |
      while read -r f; do echo "// patched $f" >> "$f"; done)
    mv "$t/large-c.tmp" "$t/large-c"
  fi
  make_zips "$t/large-c" large-c
  CASE_OLD[small-change]="$WORK/pkg/large-a.stored.zip"; CASE_NEW[small-change]="$WORK/pkg/large-c.stored.zip"
  CASE_PATCH[small-change]="$WORK/patch/large-c.stored.bsdiff"; CASE_TREE[small-change]="$t/large-c"
  make_patch "${CASE_OLD[small-change]}" "${CASE_NEW[small-change]}" "${CASE_PATCH[small-change]}"
  CASE_TREE[large]="$t/large-b" CASE_TREE[medium]="$t/medium-b/"
  ENGINE_PREPARED=1
}

# probe CMD... -> P_WALL (s), P_RSS_KB, P_WRITE (bytes): bench/probe.py; a failure aborts.
P_WALL=0 P_RSS_KB=0 P_WRITE=0
probe() {
  local out
  out=$("$PROBE" "$@") || die "command failed: $*"
  read -r P_WALL P_RSS_KB P_WRITE <<<"$out"
}

# rotate ROUND TOOL... -> the tools in this round's order (round r starts at tool r mod n),
# so each tool runs first, middle and last equally often.
rotate() {
  local r=$1; shift
  local n=$# i
  for ((i = 0; i < n; i++)); do printf '%s\n' "${@:$(( (r + i) % n + 1 )):1}"; done
}

# engine_rounds RUN_FN TOOL... : one untimed warm-up of each tool, then RUNS rounds,
# each running every tool once (`RUN_FN TOOL`, which must set P_*) in rotated order.
# -> E_T[TOOL] (wall times), E_M[TOOL] (peak RSS KiB), E_W[TOOL] (bytes written), each a list.
declare -A E_T=() E_M=() E_W=()
engine_rounds() {
  local fn=$1 r tool; shift
  E_T=() E_M=() E_W=()
  for tool in "$@"; do "$fn" "$tool"; done
  for ((r = 0; r < RUNS; r++)); do
    while read -r tool; do
      "$fn" "$tool"
      E_T[$tool]+="$P_WALL " E_M[$tool]+="$P_RSS_KB " E_W[$tool]+="$P_WRITE "
    done < <(rotate "$r" "$@")
  done
  if [[ ${VERBOSE:-0} == 1 ]]; then
    for tool in "$@"; do printf '    %-8s s: %s| KiB: %s| written: %s\n' "$tool" "${E_T[$tool]}" "${E_M[$tool]}" "${E_W[$tool]}" >&2; done
  fi
}
# shellcheck disable=SC2086  # word lists
e_median() { median ${E_T[$1]}; }
# shellcheck disable=SC2086
e_max() { max ${E_M[$1]}; }

files_of() { find "$1" -type f | wc -l; }

# engine_versus RUN_FN TREE OUT_FN: ours, bsdtar and 7zz each run once untimed, the tree each
# made (where `OUT_FN TOOL` says) compared with TREE; then engine_rounds.
# -> E_RATIO: ours / the faster of bsdtar and 7zz, of the medians.
E_RATIO=0
engine_versus() {
  local fn=$1 tree=$2 out=$3 tool
  for tool in ours bsdtar 7zz; do
    "$fn" "$tool"; diff -r "$tree" "$("$out" "$tool")" >/dev/null || die "$fn: the tree $tool made differs from $tree"
  done
  engine_rounds "$fn" ours bsdtar 7zz
  E_RATIO=$(fmt2 "$(calc "$(e_median ours) / $(min "$(e_median bsdtar)" "$(e_median 7zz)")")")
}

# -- archivers --------------------------------------------------------------
A_ZIP="" A_OUT=""
archivers_out() { echo "$A_OUT"; }
archivers_run() {
  rm -rf "$A_OUT"; settle
  case $1 in
    ours) probe "$OURS" extract "$A_ZIP" "$A_OUT" ;;
    bsdtar) mkdir -p "$A_OUT"; settle; probe bsdtar -xf "$A_ZIP" -C "$A_OUT" ;;
    7zz) probe 7zz x -y -bd -o"$A_OUT" "$A_ZIP" ;;
  esac
}

section_archivers() {
  prepare_engine
  log "archivers: $(basename "$OURS") extract ZIP DIR  vs  bsdtar -xf ZIP -C DIR  vs  7zz x -oDIR ZIP  ($RUNS rounds, rotating)"
  local pkg ours ratio
  echo
  echo "archivers: median wall time (s) of $RUNS interleaved rounds; ratio = ours / the faster of bsdtar and 7zz"
  printf '%-26s %7s %6s | %8s %8s %8s | %6s\n' package zip_MB files ours_s bsdtar_s 7zz_s ratio
  for pkg in "${ENGINE_PACKAGES[@]}"; do
    A_ZIP="$WORK/pkg/$pkg.zip" A_OUT="$WORK/out/archivers"
    engine_versus archivers_run "${CASE_TREE[$pkg]}" archivers_out
    rm -rf "$A_OUT"
    ours=$(e_median ours) ratio=$E_RATIO
    printf '%-26s %7s %6s | %8s %8s %8s | %6s\n' "$pkg" "$(size_mb "$A_ZIP")" "$(files_of "${CASE_TREE[$pkg]}")" \
      "$(fmt3 "$ours")" "$(fmt3 "$(e_median bsdtar)")" "$(fmt3 "$(e_median 7zz)")" "$ratio"
    summary "archivers.$pkg.ours_s" "$(fmt3 "$ours")"
    summary "archivers.$pkg.bsdtar_s" "$(fmt3 "$(e_median bsdtar)")"
    summary "archivers.$pkg.7zz_s" "$(fmt3 "$(e_median 7zz)")"
    summary "archivers.$pkg.rss_mb" "$(mb "$(e_max ours)")"
    check "archivers.$pkg.ratio" "$ratio" '<=' "$T_ARCHIVERS" "offline-agent extract / the faster of bsdtar and 7zz"
  done
}

# -- install ----------------------------------------------------------------
# engine_serve: one nginx on 127.0.0.1 serving $WORK/engine/www (S_URL).
engine_serve() {
  [[ -n ${S_NGINX:-} ]] && return 0
  S_DIR="$WORK/engine"; mkdir -p "$S_DIR/www"
  sync_start_nginx
  trap 'kill $S_NGINX 2>/dev/null || true' EXIT
}

# full_manifest FILE VERSION URL ZIP: an unsigned manifest of a full package.
full_manifest() {
  local sha; sha=$(sha256sum "$4" | cut -d' ' -f1)
  printf '{"app":"bench","version":"%s","miniVersion":"1.0.0","isPatch":false,"url":"%s","size":%s,"sha256":"%s","packageSha256":"%s","whitelist":["https://bench.example.com/"]}\n' \
    "$2" "$3" "$(stat -c %s "$4")" "$sha" "$sha" > "$1"
}

I_PKG="" I_DIR=""
install_out() { if [[ $1 == ours ]]; then echo "$I_DIR/root/apps/bench/current"; else echo "$I_DIR/out"; fi; }
install_run() {
  rm -rf "$I_DIR"; mkdir -p "$I_DIR/out"; settle
  case $1 in
    ours) probe "$OURS" sync --root "$I_DIR/root" --app bench --manifest "$S_URL/$I_PKG.json" --force --allow-unsigned ;;
    bsdtar) probe bash -c "curl -sf -o '$I_DIR/p.zip' '$S_URL/$I_PKG.zip' && bsdtar -xf '$I_DIR/p.zip' -C '$I_DIR/out' && sync -f '$I_DIR/out'" ;;
    7zz) probe bash -c "curl -sf -o '$I_DIR/p.zip' '$S_URL/$I_PKG.zip' && 7zz x -y -bd -o'$I_DIR/out' '$I_DIR/p.zip' >/dev/null && sync -f '$I_DIR/out'" ;;
  esac
}

section_install() {
  prepare_engine; engine_serve
  log "install: $(basename "$OURS") sync into an empty root  vs  curl + bsdtar -xf + sync -f  vs  curl + 7zz x + sync -f  ($RUNS rounds, rotating)"
  local pkg ours ratio
  echo
  echo "install: a first install from nginx on 127.0.0.1, median wall time (s) of $RUNS interleaved rounds;"
  echo "ratio = ours / the faster chain; written = ours, write_bytes of the process / package size"
  printf '%-26s %7s | %8s %12s %9s | %6s %8s %7s\n' package zip_MB ours_s curl+bsdtar_s curl+7zz_s ratio written ours_MB
  for pkg in "${ENGINE_PACKAGES[@]}"; do
    I_PKG=$pkg I_DIR="$WORK/out/install"
    cp "$WORK/pkg/$pkg.zip" "$S_DIR/www/$pkg.zip"
    full_manifest "$S_DIR/www/$pkg.json" 1.0.0 "$pkg.zip" "$S_DIR/www/$pkg.zip"
    engine_versus install_run "${CASE_TREE[$pkg]}" install_out
    rm -rf "$I_DIR"
    ours=$(e_median ours) ratio=$E_RATIO
    # shellcheck disable=SC2086
    local written; written=$(fmt1 "$(calc "100 * $(median ${E_W[ours]}) / $(stat -c %s "$S_DIR/www/$pkg.zip")")")
    printf '%-26s %7s | %8s %12s %9s | %6s %7s%% %7s\n' "$pkg" "$(size_mb "$S_DIR/www/$pkg.zip")" "$(fmt3 "$ours")" \
      "$(fmt3 "$(e_median bsdtar)")" "$(fmt3 "$(e_median 7zz)")" "$ratio" "$written" "$(mb "$(e_max ours)")"
    summary "install.$pkg.ours_s" "$(fmt3 "$ours")"
    summary "install.$pkg.curl_bsdtar_s" "$(fmt3 "$(e_median bsdtar)")"
    summary "install.$pkg.curl_7zz_s" "$(fmt3 "$(e_median 7zz)")"
    summary "install.$pkg.written_pct" "$written"
    summary "install.$pkg.rss_mb" "$(mb "$(e_max ours)")"
    check "install.$pkg.ratio" "$ratio" '<=' "$T_INSTALL" "first install / the faster of curl + bsdtar or 7zz + sync -f"
  done
}

# -- update -----------------------------------------------------------------
U_CASE="" U_DIR=""
update_run() {
  case $1 in
    ours)
      rm -rf "$U_DIR/root"; cp -a "$U_DIR/base" "$U_DIR/root"; settle
      probe "$OURS" sync --root "$U_DIR/root" --app bench --manifest "$S_URL/$U_CASE.patch.json" --force --allow-unsigned
      [[ -d $U_DIR/root/apps/bench/versions/2.0.0 ]] || die "update: $U_CASE: sync did not install 2.0.0" ;;
    chain)
      rm -rf "$U_DIR/chain"; mkdir -p "$U_DIR/chain"; settle
      probe bash -c "cd '$U_DIR/chain' && curl -sf -o p.bsdiff '$S_URL/$U_CASE.bsdiff' && bspatch '$U_DIR/installed.zip' new.zip p.bsdiff \
        && sha256sum new.zip >/dev/null && unzip -q -o new.zip -d out" ;;
  esac
}

section_update() {
  prepare_engine; engine_serve
  log "update: $(basename "$OURS") sync of a patch  vs  curl + bspatch + sha256sum + unzip  ($RUNS rounds, alternating)"
  local c target ours chain ratio written rss worst_rss=0 new_pct
  echo
  echo "update: a patch update from nginx on 127.0.0.1 onto a root holding the old version, median wall time (s) of $RUNS"
  echo "interleaved rounds; ratio = ours / the chain; written = write_bytes of ours / the new package; new = bytes of the"
  echo "new package in entries the old one lacks (name and CRC-32), %; RSS = ours, peak over the rounds"
  printf '%-14s %7s %6s %6s | %8s %8s | %6s %8s %7s\n' case zip_MB patch new% ours_s chain_s ratio written ours_MB
  for c in large medium small-change; do
    U_CASE=$c U_DIR="$WORK/out/update"
    rm -rf "$U_DIR"; mkdir -p "$U_DIR"
    cp "${CASE_OLD[$c]}" "$S_DIR/www/$c.old.zip"; cp "${CASE_NEW[$c]}" "$S_DIR/www/$c.new.zip"
    cp "${CASE_PATCH[$c]}" "$S_DIR/www/$c.bsdiff"; cp "${CASE_OLD[$c]}" "$U_DIR/installed.zip"
    full_manifest "$S_DIR/www/$c.full.json" 1.0.0 "$c.old.zip" "$S_DIR/www/$c.old.zip"
    local pkg size
    pkg=$(sha256sum "$S_DIR/www/$c.new.zip" | cut -d' ' -f1); size=$(stat -c %s "$S_DIR/www/$c.new.zip")
    printf '{"app":"bench","version":"2.0.0","miniVersion":"1.0.0","isPatch":true,"baseVersion":"1.0.0","url":"%s","size":%s,"sha256":"%s","packageSha256":"%s","fullUrl":"%s","fullSize":%s,"whitelist":["https://bench.example.com/"]}\n' \
      "$c.bsdiff" "$(stat -c %s "$S_DIR/www/$c.bsdiff")" "$(sha256sum "$S_DIR/www/$c.bsdiff" | cut -d' ' -f1)" "$pkg" "$c.new.zip" "$size" \
      > "$S_DIR/www/$c.patch.json"
    "$OURS" sync --root "$U_DIR/base" --app bench --manifest "$S_URL/$c.full.json" --force --allow-unsigned >/dev/null 2>&1 \
      || die "update: $c: installing the old version failed"
    engine_rounds update_run ours chain
    diff -r "${CASE_TREE[$c]}" "$U_DIR/root/apps/bench/current" >/dev/null || die "update: $c: our tree differs from the new version's"
    cmp -s "$U_DIR/chain/new.zip" "${CASE_NEW[$c]}" || die "update: $c: the chain's package differs"
    new_pct=$(python3 - "${CASE_OLD[$c]}" "${CASE_NEW[$c]}" <<'PY'
import sys, zipfile
old = {(i.filename, i.CRC) for i in zipfile.ZipFile(sys.argv[1]).infolist()}
new = zipfile.ZipFile(sys.argv[2]).infolist()
print(f"{100 * sum(i.file_size for i in new if (i.filename, i.CRC) not in old) / max(1, sum(i.file_size for i in new)):.0f}")
PY
)
    ours=$(e_median ours); chain=$(e_median chain)
    ratio=$(fmt2 "$(calc "$ours / $chain")")
    # shellcheck disable=SC2086
    written=$(fmt1 "$(calc "100 * $(median ${E_W[ours]}) / $size")")
    rss=$(e_max ours); worst_rss=$(max "$worst_rss" "$rss")
    printf '%-14s %7s %6s %5s%% | %8s %8s | %6s %7s%% %7s\n' "$c" "$(size_mb "$S_DIR/www/$c.new.zip")" "$(size_h "$S_DIR/www/$c.bsdiff")" \
      "$new_pct" "$(fmt3 "$ours")" "$(fmt3 "$chain")" "$ratio" "$written" "$(mb "$rss")"
    summary "update.$c.new_bytes_pct" "$new_pct"
    summary "update.$c.ours_s" "$(fmt3 "$ours")"
    summary "update.$c.chain_s" "$(fmt3 "$chain")"
    summary "update.$c.written_pct" "$written"
    summary "update.$c.rss_mb" "$(mb "$rss")"
    if [[ $c == small-change ]]; then
      check "update.$c.ratio" "$ratio" '<=' "$T_UPDATE_SMALL" "patch update of a small change / curl + bspatch + sha256sum + unzip"
      check "update.$c.written_pct" "$written" '<=' "$T_UPDATE_WRITTEN" "bytes written by a small change's update, % of the package"
    else
      check "update.$c.ratio" "$ratio" '<=' "$T_UPDATE_NEW" "patch update of a release with $new_pct % new bytes / curl + bspatch + sha256sum + unzip"
    fi
    rm -rf "$U_DIR"
  done
  check update.rss_mb "$(mb "$worst_rss")" '<=' "$T_UPDATE_RSS_MB" "peak RSS of an update, worst case"
}

# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
print_summary() {
  local line
  {
    echo "# offline-agent bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# ours=$OURS runs=$RUNS host=$(uname -srm) cpus=$(nproc) loadavg(start)=$LOAD_START loadavg(end)=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# streamlit $STREAMLIT_V1->$STREAMLIT_V2, bokeh $BOKEH_V1->$BOKEH_V2; time = median wall, rss = peak (GNU time %M)"
    for line in "${SUMMARY[@]}"; do echo "$line"; done
    for line in "${VERDICTS[@]}"; do echo "$line"; done
  } > "$RESULTS.tmp"
  mv "$RESULTS.tmp" "$RESULTS"
  printf '\n==================== summary (%s) ====================\n' "${RESULTS#"$ROOT"/}"
  cat "$RESULTS"
}

main() {
  local args=("$@") s todo=()
  (( ${#args[@]} )) || args=(all)
  for s in "${args[@]}"; do
    case $s in
      all) todo+=("${SECTIONS[@]}") ;;
      engine) todo+=("${ENGINE_SECTIONS[@]}") ;;
      prepare) todo+=(prepare) ;;
      -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) declare -F "section_$s" >/dev/null || die "unknown section '$s' (have: prepare ${SECTIONS[*]} all report proxy engine ${ENGINE_SECTIONS[*]})"
         todo+=("$s") ;;
    esac
  done
  mkdir -p "$WORK"
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  if awk -v l="${LOAD_START%% *}" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    log "warning: load average $LOAD_START on $(nproc) CPUs: timings will be noisy (use an idle machine, or RUNS=9)"
  fi
  # `prepare` needs no binary; `report` builds offline-server itself.
  if [[ " ${todo[*]} " != " prepare " && " ${todo[*]} " != " report " ]]; then do_build; fi
  for s in "${todo[@]}"; do
    if [[ $s == prepare ]]; then prepare; else "section_$s"; fi
  done
  print_summary
}

main "$@"
