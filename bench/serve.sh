#!/usr/bin/env bash
# `offline-agent serve` vs nginx on loopback, side by side in one run: requests/s and
# p99 latency (wrk --latency) for a small JS file (the fixture app's js/app.js, ~30 KB)
# and a 1 MiB file, both servers serving the same version directory.
# Targets: ours >= 0.5x nginx's requests/s for each file; our idle RSS (VmRSS after
# startup and one request, before the load) <= 15 MB.
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
DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
BUILD=${BUILD:-auto}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-32}
NGINX=${NGINX:-/usr/sbin/nginx}
TARGET=0.5

die() { printf 'serve.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || die "missing tool '$1' (apt-get install ${2:-$1})"; }
need wrk
need curl
[ -x "$NGINX" ] || die "missing nginx at $NGINX (apt-get install nginx-light)"

if [ "$BUILD" = 1 ] || { [ "$BUILD" = auto ] && [ "$OURS" = "$DEFAULT_OURS" ]; }; then
    log "building release (scripts/build-release.sh offline-agent)"
    "$ROOT/scripts/build-release.sh" offline-agent >&2
fi
[ -x "$OURS" ] || die "no binary at $OURS"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-serve.XXXXXX")
chmod 755 "$WORK"   # nginx's workers run as an unprivileged user when started by root
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
}
trap cleanup EXIT

# --- an agent root with one active version: the fixture app plus a 1 MiB file ----
AGENT="$WORK/agent"
VERSION_DIR="$AGENT/apps/mall/versions/1.0.0"
mkdir -p "$AGENT/apps/mall/versions" "$AGENT/apps/mall/packages" "$AGENT/apps/mall/downloads"
cp -R "$ROOT/fixtures/sample-app/1.0.0" "$VERSION_DIR"
head -c 1048576 /dev/urandom > "$VERSION_DIR/big.bin"
cat > "$AGENT/apps/mall/versions/1.0.0.json" <<'JSON'
{"installedAt": "2024-01-01T00:00:00Z", "miniVersion": "1.0.0", "packageSha256": "0000000000000000000000000000000000000000000000000000000000000000",
 "rollout": 100, "version": "1.0.0", "via": "full", "whitelist": ["https://h5.example.invalid/mall/"]}
JSON
ln -s versions/1.0.0 "$AGENT/apps/mall/current"
echo bench-device > "$AGENT/device-id"

# --- offline-agent serve on a free port -----------------------------------------
: > "$WORK/ours.out"   # exists before the server's shell opens it, for the poll below
"$OURS" serve --root "$AGENT" --port 0 > "$WORK/ours.out" 2> "$WORK/ours.err" &
PIDS+=($!)
OURS_PORT=
for _ in $(seq 1 100); do
    OURS_PORT=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$WORK/ours.out")
    [ -n "$OURS_PORT" ] && break
    sleep 0.1
done
[ -n "$OURS_PORT" ] || die "offline-agent serve did not start: $(cat "$WORK/ours.err")"
OURS_PID=${PIDS[-1]}

# --- idle RSS: after startup and one request, before any load ------------------
TARGET_IDLE_RSS_MB=15
curl -sf -o /dev/null "http://127.0.0.1:$OURS_PORT/mall/index.html" || die "GET :$OURS_PORT/mall/index.html failed"
sleep 0.5
IDLE_RSS_KB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$OURS_PID/status")
IDLE_RSS_MB=$(awk -v k="$IDLE_RSS_KB" 'BEGIN { printf "%.1f", k / 1024 }')
log "offline-agent serve idle RSS: $IDLE_RSS_MB MiB (target <= $TARGET_IDLE_RSS_MB MB)"

# --- nginx, not daemonized, on another free port ---------------------------------
NGINX_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location /mall/ { alias $VERSION_DIR/; etag on; }
    }
}
CONF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2> "$WORK/nginx/stderr" &
PIDS+=($!)
for _ in $(seq 1 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/mall/index.html" && break
    sleep 0.1
done

# --- both serve the same bytes -------------------------------------------------
for path in js/app.js big.bin; do
    for port in "$OURS_PORT" "$NGINX_PORT"; do
        curl -sf "http://127.0.0.1:$port/mall/$path" -o "$WORK/check" || die "GET :$port/mall/$path failed"
        cmp -s "$WORK/check" "$VERSION_DIR/$path" || die ":$port/mall/$path differs from the file"
    done
done

# --- measure ------------------------------------------------------------------
# wrk_run URL -> "req/s p99_ms"
wrk_run() {
    local out
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$1")
    printf '%s\n' "$out" >> "$WORK/wrk.log"
    local rps p99 errors
    rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')
    p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {
        v = $2; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v);
        if (unit == "us") v /= 1000; else if (unit == "s") v *= 1000; else if (unit == "m") v *= 60000;
        printf "%.3f", v }')
    errors=$(printf '%s\n' "$out" | awk '/Non-2xx or 3xx responses:/ { print $5 } /Socket errors:/ { print "socket-errors" }')
    [ -z "$errors" ] || die "wrk reported errors for $1: $errors"
    echo "$rps $p99"
}

# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A RPS P99 ALL
for case in small:js/app.js large:big.bin; do
    name=${case%%:*} path=${case#*:}
    for server in ours nginx; do
        port=$OURS_PORT; [ "$server" = nginx ] && port=$NGINX_PORT
        log "$server $name ($path): warm-up 3s"
        wrk -t"$THREADS" -c"$CONNECTIONS" -d3s "http://127.0.0.1:$port/mall/$path" > /dev/null
    done
    # Rounds alternate the servers, so a load change on the machine hits both alike.
    rps_ours=() p99_ours=() rps_nginx=() p99_nginx=()
    for round in $(seq 1 "$ROUNDS"); do
        for server in ours nginx; do
            port=$OURS_PORT; [ "$server" = nginx ] && port=$NGINX_PORT
            log "$server $name ($path): round $round/$ROUNDS, $DURATION, $THREADS thread(s), $CONNECTIONS connections"
            read -r rps p99 < <(wrk_run "http://127.0.0.1:$port/mall/$path")
            eval "rps_$server+=(\"\$rps\") p99_$server+=(\"\$p99\")"
            ALL[$server.$name]+="$rps/$p99 "
        done
    done
    RPS[ours.$name]=$(median "${rps_ours[@]}") P99[ours.$name]=$(median "${p99_ours[@]}")
    RPS[nginx.$name]=$(median "${rps_nginx[@]}") P99[nginx.$name]=$(median "${p99_nginx[@]}")
done

SIZE_SMALL=$(stat -c %s "$VERSION_DIR/js/app.js")
printf '\n%-28s %-14s %12s %10s   %s\n' "file" "server" "requests/s" "p99 ms" "(each round: req/s/p99 ms)"
for case in small large; do
    label="js/app.js ($SIZE_SMALL B)"; [ "$case" = large ] && label="big.bin (1 MiB)"
    for server in ours nginx; do
        shown=offline-agent; [ "$server" = nginx ] && shown="nginx $("$NGINX" -v 2>&1 | sed 's|.*/||')"
        printf '%-28s %-14s %12.0f %10.2f   %s\n' "$label" "$shown" "${RPS[$server.$case]}" "${P99[$server.$case]}" "${ALL[$server.$case]}"
    done
done
echo
status=0
for case in small large; do
    ratio=$(awk -v a="${RPS[ours.$case]}" -v b="${RPS[nginx.$case]}" 'BEGIN { printf "%.2f", a / b }')
    p99ratio=$(awk -v a="${P99[ours.$case]}" -v b="${P99[nginx.$case]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    verdict=PASS
    awk -v r="$ratio" -v t="$TARGET" 'BEGIN { exit !(r >= t) }' || { verdict=FAIL; status=1; }
    echo "# $verdict $case: offline-agent/nginx requests/s = $ratio (target >= $TARGET); p99 ratio = $p99ratio"
done
verdict=PASS
awk -v r="$IDLE_RSS_MB" -v t="$TARGET_IDLE_RSS_MB" 'BEGIN { exit !(r <= t) }' || { verdict=FAIL; status=1; }
echo "# $verdict idle RSS: offline-agent serve VmRSS after startup and one request = $IDLE_RSS_MB MiB (target <= $TARGET_IDLE_RSS_MB MB)"
echo "# medians of $ROUNDS alternating rounds of wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(uname -sr)"
exit $status
