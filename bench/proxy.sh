#!/usr/bin/env bash
# Forwarding on a mirrored origin: `offline-agent serve` vs nginx `proxy_pass`, side by
# side in one run, both in front of the same upstream (a second nginx on loopback that
# answers GET /api/small.json from a file and POST /api/echo with a fixed JSON body).
# Requests/s and p99 latency (wrk --latency). Target: ours >= 0.5x nginx's requests/s.
# Run as `bench/run.sh proxy` or standalone.
#
#   bench/proxy.sh
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   DURATION=10s                  each measured wrk run (after a 3 s warm-up per case and front)
#   ROUNDS=3                      measured runs per case and front, alternating; medians reported
#   THREADS=2 CONNECTIONS=50      wrk load
#   NGINX=/usr/sbin/nginx         nginx binary (Debian nginx-light is enough)
#   KEEP=1                        keep the scratch directory
#
# `serve` answers a mirrored origin on `<host>.<scheme>-<port>.localhost` (docs/PROTOCOL.md,
# "Mirrored origins"); wrk connects to 127.0.0.1 and names the mirror in `Host`, so no
# resolver is involved. Needs wrk, nginx, curl; exits 1 when the target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
BUILD=${BUILD:-auto}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-50}
NGINX=${NGINX:-/usr/sbin/nginx}
TARGET=0.5

die() { printf 'proxy.sh: error: %s\n' "$*" >&2; exit 1; }
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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-proxy.XXXXXX")
chmod 755 "$WORK"   # nginx's workers run as an unprivileged user when started by root
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
UP_PORT=$(free_port) NGINX_PORT=$(free_port)
MIRROR="127.0.0.1.http-$UP_PORT.localhost"

# --- one nginx: the upstream origin, and the proxy_pass front -------------------
mkdir -p "$WORK/nginx" "$WORK/www/api"
python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item %d" % i, "price": i * 1.5} for i in range(12)]}))' \
    > "$WORK/www/api/small.json"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    default_type application/json;
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    # The origin.
    server {
        listen 127.0.0.1:$UP_PORT;
        root $WORK/www;
        location = /api/echo { client_body_buffer_size 64k; return 200 '{"ok":true}'; }
    }
    # nginx in front of it, kept-alive upstream connections as serve keeps them.
    upstream origin { server 127.0.0.1:$UP_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host 127.0.0.1:$UP_PORT;
        }
    }
}
CONF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2> "$WORK/nginx/stderr" &
PIDS+=($!)
for _ in $(seq 1 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$UP_PORT/api/small.json" && break
    sleep 0.1
done

# --- an agent root whose active version whitelists a path on the origin ---------
AGENT="$WORK/agent"
VERSION_DIR="$AGENT/apps/mall/versions/1.0.0"
mkdir -p "$AGENT/apps/mall/versions" "$AGENT/apps/mall/packages" "$AGENT/apps/mall/downloads"
cp -R "$ROOT/fixtures/sample-app/1.0.0" "$VERSION_DIR"
cat > "$AGENT/apps/mall/versions/1.0.0.json" <<JSON
{"installedAt": "2024-01-01T00:00:00Z", "miniVersion": "1.0.0", "packageSha256": "0000000000000000000000000000000000000000000000000000000000000000",
 "rollout": 100, "version": "1.0.0", "via": "full", "whitelist": ["http://127.0.0.1:$UP_PORT/mall/"]}
JSON
ln -s versions/1.0.0 "$AGENT/apps/mall/current"
echo bench-device > "$AGENT/device-id"

: > "$WORK/ours.out"
"$OURS" serve --root "$AGENT" --port 0 > "$WORK/ours.out" 2> "$WORK/ours.err" &
PIDS+=($!)
OURS_PORT=
for _ in $(seq 1 100); do
    OURS_PORT=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$WORK/ours.out")
    [ -n "$OURS_PORT" ] && break
    sleep 0.1
done
[ -n "$OURS_PORT" ] || die "offline-agent serve did not start: $(cat "$WORK/ours.err")"

# --- both fronts forward the same bytes -----------------------------------------
front_host() { if [ "$1" = ours ]; then echo "$MIRROR:$OURS_PORT"; else echo "127.0.0.1:$NGINX_PORT"; fi; }
front_port() { if [ "$1" = ours ]; then echo "$OURS_PORT"; else echo "$NGINX_PORT"; fi; }
for front in ours nginx; do
    curl -sf -H "Host: $(front_host $front)" "http://127.0.0.1:$(front_port $front)/api/small.json" -o "$WORK/check" \
        || die "$front: GET /api/small.json was not forwarded (does serve mirror origins yet?)"
    cmp -s "$WORK/check" "$WORK/www/api/small.json" || die "$front: /api/small.json differs from the origin's"
    [ "$(curl -sf -X POST --data-binary @"$WORK/www/api/small.json" -H "Host: $(front_host $front)" \
        "http://127.0.0.1:$(front_port $front)/api/echo")" = '{"ok":true}' ] || die "$front: POST /api/echo was not forwarded"
done

# POST with a small JSON body, for wrk.
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"cart":[1,2,3],"note":"bench"}'
wrk.headers["Content-Type"] = "application/json"
LUA

# wrk_run FRONT CASE -> "req/s p99_ms"
wrk_run() {
    local front=$1 case=$2 out script=()
    [ "$case" = post ] && script=(-s "$WORK/post.lua")
    local path=/api/small.json; [ "$case" = post ] && path=/api/echo
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${3:-$DURATION}" --latency "${script[@]}" -H "Host: $(front_host "$front")" \
        "http://127.0.0.1:$(front_port "$front")$path")
    printf '%s\n' "$out" >> "$WORK/wrk.log"
    local rps p99 errors
    rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')
    p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {
        v = $2; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v);
        if (unit == "us") v /= 1000; else if (unit == "s") v *= 1000; else if (unit == "m") v *= 60000;
        printf "%.3f", v }')
    errors=$(printf '%s\n' "$out" | awk '/Non-2xx or 3xx responses:/ { print $5 } /Socket errors:/ { print "socket-errors" }')
    [ -z "$errors" ] || die "wrk reported errors for $front $case: $errors"
    echo "$rps $p99"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A RPS P99 ALL
for case in get post; do
    for front in ours nginx; do
        log "$front $case: warm-up 3s"
        wrk_run "$front" "$case" 3s > /dev/null
    done
    # Rounds alternate the fronts, so a load change on the machine hits both alike.
    rps_ours=() p99_ours=() rps_nginx=() p99_nginx=()
    for round in $(seq 1 "$ROUNDS"); do
        for front in ours nginx; do
            log "$front $case: round $round/$ROUNDS, $DURATION, $THREADS thread(s), $CONNECTIONS connections"
            read -r rps p99 < <(wrk_run "$front" "$case")
            eval "rps_$front+=(\"\$rps\") p99_$front+=(\"\$p99\")"
            ALL[$front.$case]+="$rps/$p99 "
        done
    done
    RPS[ours.$case]=$(median "${rps_ours[@]}") P99[ours.$case]=$(median "${p99_ours[@]}")
    RPS[nginx.$case]=$(median "${rps_nginx[@]}") P99[nginx.$case]=$(median "${p99_nginx[@]}")
done

printf '\n%-34s %-14s %12s %10s   %s\n' "forwarded request" "front" "requests/s" "p99 ms" "(each round: req/s/p99 ms)"
for case in get post; do
    label="GET /api/small.json ($(stat -c %s "$WORK/www/api/small.json") B)"; [ "$case" = post ] && label="POST /api/echo (31 B body)"
    for front in ours nginx; do
        shown=offline-agent; [ "$front" = nginx ] && shown="nginx $("$NGINX" -v 2>&1 | sed 's|.*/||')"
        printf '%-34s %-14s %12.0f %10.2f   %s\n' "$label" "$shown" "${RPS[$front.$case]}" "${P99[$front.$case]}" "${ALL[$front.$case]}"
    done
done
echo
status=0
for case in get post; do
    ratio=$(awk -v a="${RPS[ours.$case]}" -v b="${RPS[nginx.$case]}" 'BEGIN { printf "%.2f", a / b }')
    p99ratio=$(awk -v a="${P99[ours.$case]}" -v b="${P99[nginx.$case]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    verdict=PASS
    awk -v r="$ratio" -v t="$TARGET" 'BEGIN { exit !(r >= t) }' || { verdict=FAIL; status=1; }
    echo "# $verdict proxy $case: offline-agent/nginx requests/s = $ratio (target >= $TARGET); p99 ours ${P99[ours.$case]} ms, nginx ${P99[nginx.$case]} ms (ratio $p99ratio)"
done
echo "# medians of $ROUNDS alternating rounds of wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(uname -sr)"
exit $status
