#!/usr/bin/env bash
# What TUF costs a device (issue 37), on the release build, side by side with today's
# signed manifest check (`--public-key`), both against the same publish directory served
# by nginx on 127.0.0.1 (a static host: the repository is `<base>/`, its metadata
# `<base>/metadata/`):
#   - bytes per check that finds nothing new, target <= 1 KB in all: what nginx sent
#     (`$bytes_sent`: status line, headers and body) and the bodies alone, per check,
#     from its access log; `sync --force` with `--trusted-root` (the next root's 404 and
#     `timestamp.json` revalidated by its ETag) against `--public-key` (`manifest.json`);
#   - the throttled no-op `sync` (the check interval has not passed: reads the app's
#     state and exits 0), target <= 5 ms, median; both configurations;
#   - a full check, target <= 5 ms over the signed check: `sync --force` that finds
#     nothing new after a release verb (`set --expires`) re-signed the manifest and every
#     role but root: TUF fetches and verifies the next root's 404, timestamp, snapshot,
#     targets and the manifest; `--public-key` fetches and verifies the changed signed
#     manifest (each device restored, untimed, to its state before the verb). Beside it,
#     a first check (the TUF store empty; the signed check without ETag). Runs alternate
#     TUF, signed; medians.
#
#   bench/tuf.sh
#
# Environment:
#   OURS=/path/to/offline-agent        device binary (default .build/release/offline-agent)
#   PUBLISHER=/path/to/offline-publish (default .build/release/offline-publish)
#   BUILD=auto|1|0                     build both first (auto: only when OURS is the default)
#   RUNS=30                            timed runs per configuration (throttled: RUNS x 10)
#   RESULTS=bench/tuf-results.txt      where the key=value lines and verdicts go
#   KEEP=1                             keep the scratch directory
#
# Needs nginx (nginx-light) and python3; hyperfine (apt) for the throttled no-op when
# installed, else a bash loop. Prints key=value lines, then PASS/FAIL lines; exits 1 when
# a target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
PUBLISHER=${PUBLISHER:-$ROOT/.build/release/offline-publish}
BUILD=${BUILD:-auto}
RUNS=${RUNS:-30}
RESULTS=${RESULTS:-$ROOT/bench/tuf-results.txt}
NGINX=${NGINX:-/usr/sbin/nginx}
T_BYTES=1024        # bytes per check that finds nothing new, in all
T_NOOP_MS=5         # throttled no-op sync, median
T_FULL_EXTRA_MS=5   # full TUF check over the signed check, medians

die() { printf 'tuf.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }
[ -x "$NGINX" ] || die "missing nginx at $NGINX (apt-get install nginx-light)"
command -v python3 >/dev/null || die "missing python3"

if [ "$BUILD" = 1 ] || { [ "$BUILD" = auto ] && [ "$OURS" = "$DEFAULT_OURS" ]; }; then
    log "building release (scripts/build-release.sh offline-agent offline-publish)"
    "$ROOT/scripts/build-release.sh" offline-agent offline-publish >&2
fi
[ -x "$OURS" ] || die "no binary at $OURS"
[ -x "$PUBLISHER" ] || die "no binary at $PUBLISHER"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-tuf.XXXXXX")
chmod 755 "$WORK"
PIDS=()
finish() {
    ((${#PIDS[@]})) && { kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; }
    [ "${KEEP:-0}" = 1 ] && log "kept $WORK" || rm -rf "$WORK"
}
trap finish EXIT

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- the repository: mall 1.0.0 published with one key (every TUF role, and the
# manifest's own signature), served by nginx with an access log of what it sent ---------
PUB="$WORK/publish"
"$PUBLISHER" keygen --out "$WORK/signing.key" >/dev/null
"$PUBLISHER" publish --app mall --version 1.0.0 --source "$ROOT/fixtures/sample-app/1.0.0" --out "$PUB" \
    --whitelist https://h5.example.com/mall/ --key "$WORK/signing.key" >/dev/null
PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 256; }
http {
    log_format bytes '\$status \$bytes_sent \$body_bytes_sent \$request_uri';
    access_log $WORK/nginx/access.log bytes;
    default_type application/octet-stream;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen 127.0.0.1:$PORT;
        root $PUB;
    }
}
CONF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2> "$WORK/nginx/stderr" &
PIDS+=($!)
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do curl -sf -o /dev/null "$BASE/mall/manifest.json" && break; sleep 0.1; done
curl -sf -o /dev/null "$BASE/mall/manifest.json" || die "nginx did not answer: $(cat "$WORK/nginx/stderr" "$WORK/nginx/error.log" 2>/dev/null)"

# The two devices, each with 1.0.0 installed by its own path.
TUF_ARGS=(--app mall --manifest "$BASE/mall/manifest.json" --trusted-root "$PUB/metadata/1.root.json")
KEY_ARGS=(--app mall --manifest "$BASE/mall/manifest.json" --public-key "$WORK/signing.key.pub")
for kind in tuf key; do
    args_name=${kind^^}_ARGS[@]
    "$OURS" sync --root "$WORK/$kind" "${!args_name}" --force --json > "$WORK/$kind.install.json" || die "$kind: install failed: $(cat "$WORK/$kind.install.json")"
    grep -q '"result" *: *"updated"' "$WORK/$kind.install.json" || die "$kind: not installed: $(cat "$WORK/$kind.install.json")"
done

# --- bytes per check that finds nothing new ------------------------------------------
CHECKS=10
declare -A SENT BODY REQUESTS
# The client keeps timestamp.json's ETag only once the file is 2 s older than the answer
# (nginx's ETag is its modification second and size): what a fleet meets, whose timestamp
# was signed minutes or days before a check, not seconds.
sleep 2.1
for kind in tuf key; do
    args_name=${kind^^}_ARGS[@]
    "$OURS" sync --root "$WORK/$kind" "${!args_name}" --force >/dev/null   # the steady state: ETag and trusted metadata in place
    : > "$WORK/nginx/access.log"
    for _ in $(seq 1 "$CHECKS"); do
        out=$("$OURS" sync --root "$WORK/$kind" "${!args_name}" --force --json)
        grep -q '"result" *: *"up-to-date"' <<< "$out" || die "$kind: a no-op check did not end up-to-date: $out"
    done
    sleep 0.2   # nginx writes its log line after the response
    read -r SENT[$kind] BODY[$kind] REQUESTS[$kind] < <(awk -v n="$CHECKS" '{ s += $2; b += $3; r += 1 } END { printf "%.0f %.0f %.1f\n", s / n, b / n, r / n }' "$WORK/nginx/access.log")
    log "$kind: a no-op check's requests: $(awk '{ print $1, $2 "B", $4 }' "$WORK/nginx/access.log" | sort | uniq -c | tr '\n' ';')"
done

# --- the throttled no-op --------------------------------------------------------------
declare -A NOOP
noop_runs=$((RUNS * 10))
for kind in tuf key; do
    args_name=${kind^^}_ARGS[@]
    "$OURS" sync --root "$WORK/$kind" "${!args_name}" >/dev/null   # within the interval: throttled
    cmd=("$OURS" sync --root "$WORK/$kind" "${!args_name}")
    if command -v hyperfine >/dev/null 2>&1; then
        hyperfine -N -w 5 -r "$noop_runs" --export-json "$WORK/noop-$kind.json" -- "${cmd[*]}" >&2
        NOOP[$kind]=$(python3 -c 'import json, sys; print("%.3f" % (1000 * json.load(open(sys.argv[1]))["results"][0]["median"]))' "$WORK/noop-$kind.json")
    else
        walls=()
        for _ in $(seq 1 "$noop_runs"); do
            t0=$EPOCHREALTIME; "${cmd[@]}" >/dev/null 2>&1; t1=$EPOCHREALTIME
            walls+=("$(calc "1000 * ($t1 - $t0)")")
        done
        NOOP[$kind]=$(median "${walls[@]}")
    fi
done

# --- the full check -----------------------------------------------------------------------
# full_check NAME: RUNS alternating runs (after an untimed one) of `sync --force` ending
# up-to-date, each from a copy of the device's template ($WORK/KIND.NAME, restored
# untimed) -> FULL[NAME.tuf], FULL[NAME.key] (medians, ms).
declare -A FULL
full_check() {
    local name=$1 run kind t0 t1 out args_name tuf_walls=() key_walls=()
    for run in $(seq 0 "$RUNS"); do
        for kind in tuf key; do
            args_name=${kind^^}_ARGS[@]
            rm -rf "$WORK/$kind.run"; cp -a "$WORK/$kind.$name" "$WORK/$kind.run"
            t0=$EPOCHREALTIME
            out=$("$OURS" sync --root "$WORK/$kind.run" "${!args_name}" --force --json)
            t1=$EPOCHREALTIME
            grep -q '"result" *: *"up-to-date"' <<< "$out" || die "$kind: a $name check did not end up-to-date: $out"
            ((run == 0)) && continue
            if [ "$kind" = tuf ]; then tuf_walls+=("$(calc "1000 * ($t1 - $t0)")"); else key_walls+=("$(calc "1000 * ($t1 - $t0)")"); fi
        done
    done
    FULL[$name.tuf]=$(median "${tuf_walls[@]}") FULL[$name.key]=$(median "${key_walls[@]}")
    : > "$WORK/nginx/access.log"
    rm -rf "$WORK/tuf.run"; cp -a "$WORK/tuf.$name" "$WORK/tuf.run"
    "$OURS" sync --root "$WORK/tuf.run" "${TUF_ARGS[@]}" --force >/dev/null
    sleep 0.2
    log "tuf: a $name check's requests: $(awk '{ print $1, $2 "B", $4 }' "$WORK/nginx/access.log" | tr '\n' ';')"
}
# After a release verb: the devices as they are now (trusted metadata and the manifest's
# ETag in place), then `set --expires` re-signs the manifest and every role but root, so
# each run fetches and verifies timestamp, snapshot, targets and the manifest (TUF), or
# the changed manifest (signed check), and finds the same version.
cp -a "$WORK/tuf" "$WORK/tuf.release"; cp -a "$WORK/key" "$WORK/key.release"
"$PUBLISHER" set --app mall --out "$PUB" --expires 30d --key "$WORK/signing.key" >/dev/null
full_check release
# A first check: the device's TUF store empty (the root bootstrapped from the configured
# file and every role stored, with its directories), against a signed check without ETag.
cp -a "$WORK/tuf" "$WORK/tuf.first"; rm -rf "$WORK/tuf.first/tuf" "$WORK/tuf.first/apps/mall/check.json"
cp -a "$WORK/key" "$WORK/key.first"; rm -f "$WORK/key.first/apps/mall/check.json"
full_check first
EXTRA=$(calc "${FULL[release.tuf]} - ${FULL[release.key]}")
FIRST_EXTRA=$(calc "${FULL[first.tuf]} - ${FULL[first.key]}")

# --- results ------------------------------------------------------------------------------
STATUS=0
verdict() {   # KEY VALUE LIMIT TEXT
    if awk -v v="$2" -v t="$3" 'BEGIN { exit !(v <= t) }'; then echo "# PASS $1: $4"; else echo "# FAIL $1: $4"; STATUS=1; fi
}
{
    echo "# bench/tuf.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $("$OURS" --version 2>/dev/null | head -1), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "noop_check.bytes_sent.tuf=${SENT[tuf]}"
    echo "noop_check.bytes_sent.public_key=${SENT[key]}"
    echo "noop_check.bytes_sent.ratio=$(calc "${SENT[tuf]} / ${SENT[key]}")"
    echo "noop_check.body_bytes.tuf=${BODY[tuf]}"
    echo "noop_check.body_bytes.public_key=${BODY[key]}"
    echo "noop_check.requests.tuf=${REQUESTS[tuf]}"
    echo "noop_check.requests.public_key=${REQUESTS[key]}"
    echo "throttled_noop_ms.tuf=${NOOP[tuf]}"
    echo "throttled_noop_ms.public_key=${NOOP[key]}"
    echo "throttled_noop.ratio=$(calc "${NOOP[tuf]} / ${NOOP[key]}")"
    echo "full_check_ms.tuf=${FULL[release.tuf]}"
    echo "full_check_ms.public_key=${FULL[release.key]}"
    echo "full_check.ratio=$(calc "${FULL[release.tuf]} / ${FULL[release.key]}")"
    echo "full_check.extra_ms=$EXTRA"
    echo "first_check_ms.tuf=${FULL[first.tuf]}"
    echo "first_check_ms.public_key=${FULL[first.key]}"
    echo "first_check.ratio=$(calc "${FULL[first.tuf]} / ${FULL[first.key]}")"
    echo "first_check.extra_ms=$FIRST_EXTRA"
    verdict noop_check.bytes_sent.tuf "${SENT[tuf]}" "$T_BYTES" "a TUF check that finds nothing new: ${SENT[tuf]} B sent in ${REQUESTS[tuf]} requests (target <= $T_BYTES B in all; the signed manifest check: ${SENT[key]} B in ${REQUESTS[key]})"
    verdict throttled_noop_ms.tuf "${NOOP[tuf]}" "$T_NOOP_MS" "throttled no-op sync with --trusted-root: ${NOOP[tuf]} ms median (target <= $T_NOOP_MS ms; --public-key: ${NOOP[key]} ms)"
    verdict full_check.extra_ms "$EXTRA" "$T_FULL_EXTRA_MS" "full TUF check after a release ${FULL[release.tuf]} ms - signed check ${FULL[release.key]} ms = $EXTRA ms, medians of $RUNS alternating runs (target <= $T_FULL_EXTRA_MS ms; a first check: $FIRST_EXTRA ms)"
} | tee "$RESULTS"
exit "$STATUS"
