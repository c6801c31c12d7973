#!/usr/bin/env bash
# `offline-agent serve` vs nginx on loopback, side by side in one run: requests/s and
# p99 latency (wrk --latency) for a small JS file (the fixture app's js/app.js, ~30 KB)
# and a 1 MiB file, both servers serving the same version directory.
# Targets: ours >= 0.5x nginx's requests/s for both files, a floor only (issue 29: what a
# user feels is bench/pageload.sh's page load; the old 0.8x for the small file is
# retired); our idle RSS (VmRSS after startup and one request, before the load) <= 15 MB.
#
#   bench/serve.sh
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   DURATION=10s                  each measured wrk run (after a 3 s warm-up per case and server)
#   ROUNDS=3                      measured runs per case and server, alternating; medians reported
#   THREADS=1 CONNECTIONS=32      wrk load
#   NGINX=/usr/sbin/nginx         nginx binary (Debian nginx-light is enough)
#   KEEP=1                        keep the scratch directory
#
# Standalone: needs wrk, nginx, curl; prints a table, ratios and PASS/FAIL lines, and
# exits 1 when a target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=serve THREADS=${THREADS:-1} CONNECTIONS=${CONNECTIONS:-32}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# --- an agent root with one active version: the fixture app plus a 1 MiB file ----
agent_root "https://h5.example.invalid/mall/"
head -c 1048576 /dev/urandom > "$VERSION_DIR/big.bin"
# Started as after a boot, with the binary out of the page cache, so the idle RSS below
# is comparable with `bench/run.sh footprint`'s (bench/README.md says why).
dd if="$OURS" iflag=nocache count=0 status=none
start_serve

# --- idle RSS: after startup and one request, before any load ------------------
TARGET_IDLE_RSS_MB=15
curl -sf -o /dev/null "http://127.0.0.1:$OURS_PORT/mall/index.html" || die "GET :$OURS_PORT/mall/index.html failed"
sleep 0.5
IDLE_RSS_KB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$OURS_PID/status")
IDLE_RSS_MB=$(awk -v k="$IDLE_RSS_KB" 'BEGIN { printf "%.1f", k / 1024 }')
log "offline-agent serve idle RSS: $IDLE_RSS_MB MiB (target <= $TARGET_IDLE_RSS_MB MB)"

# --- nginx, not daemonized, on another free port ---------------------------------
NGINX_PORT=$(free_port)
static_nginx "$NGINX_PORT" "location /mall/ { alias $VERSION_DIR/; etag on; }" "http://127.0.0.1:$NGINX_PORT/mall/index.html"

# --- both serve the same bytes -------------------------------------------------
for path in js/app.js big.bin; do
    for port in "$OURS_PORT" "$NGINX_PORT"; do
        curl -sf "http://127.0.0.1:$port/mall/$path" -o "$WORK/check" || die "GET :$port/mall/$path failed"
        cmp -s "$WORK/check" "$VERSION_DIR/$path" || die ":$port/mall/$path differs from the file"
    done
done

# --- measure ------------------------------------------------------------------
# case_args CASE FRONT -> the URL wrk loads
case_args() {
    local path=js/app.js port=$OURS_PORT
    [ "$1" = large ] && path=big.bin
    [ "$2" = nginx ] && port=$NGINX_PORT
    echo "http://127.0.0.1:$port/mall/$path"
}
measure small
measure large

SIZE_SMALL=$(stat -c %s "$VERSION_DIR/js/app.js")
printf '\n%-28s %-14s %12s %10s %11s   %s\n' "file" "server" "requests/s" "p99 ms" "CPU us/req" "(each round: req/s/p99 ms)"
for case in small large; do
    label="js/app.js ($SIZE_SMALL B)"; [ "$case" = large ] && label="big.bin (1 MiB)"
    for server in ours nginx; do
        shown=offline-agent; [ "$server" = nginx ] && shown="nginx $(nginx_version)"
        printf '%-28s %-14s %12.0f %10.2f %11.1f   %s\n' "$label" "$shown" "${RPS[$server.$case]}" "${P99[$server.$case]}" "${CPU[$server.$case]}" "${ALL[$server.$case]}"
    done
done
echo
verdict small small
verdict large large
result=PASS
awk -v r="$IDLE_RSS_MB" -v t="$TARGET_IDLE_RSS_MB" 'BEGIN { exit !(r <= t) }' || { result=FAIL; STATUS=1; }
echo "# $result idle RSS: offline-agent serve VmRSS after startup and one request = $IDLE_RSS_MB MiB (target <= $TARGET_IDLE_RSS_MB MB)"
conditions
exit $STATUS
