#!/usr/bin/env bash
# Forwarding on a mirrored origin: `offline-agent serve` vs nginx `proxy_pass`, side by
# side in one run, both in front of the same upstream (a second nginx, in processes of its
# own, that answers GET /api/small.json from a file and POST /api/echo with a fixed JSON
# body).
# Requests/s and p99 latency (wrk --latency), reported: no target (issue 29 retired the
# 0.5x; what a user feels of forwarding is bench/forward-latency.sh's added latency).
# The closing lines still read `# PASS proxy ...` (a target of 0x) for bench/run.sh proxy.
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
#   CASES="get post"              the cases measured (e.g. CASES=get)
#   KEEP=1                        keep the scratch directory
#
# `serve` answers a mirrored origin on `<host>.<scheme>-<port>.localhost` (docs/PROTOCOL.md,
# "Mirrored origins"); wrk connects to 127.0.0.1 and names the mirror in `Host`, so no
# resolver is involved. Needs wrk, nginx, curl; exits 1 only when a request fails.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=proxy THREADS=${THREADS:-2} CONNECTIONS=${CONNECTIONS:-50}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

UP_PORT=$(free_port) NGINX_PORT=$(free_port)
MIRROR="127.0.0.1.http-$UP_PORT.localhost"

# --- the upstream origin: an nginx of its own ------------------------------------
# Its own processes, so the front nginx's CPU (and its scheduling) is the front's alone,
# as ours is, and neither front shares a process with the origin it forwards to.
json_origin "$UP_PORT" "location = /api/echo { client_body_buffer_size 64k; return 200 '{\"ok\":true}'; }"

# --- nginx in front of it, kept-alive upstream connections as serve keeps them ----
nginx_conf <<CONF
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
CONF
start_nginx "http://127.0.0.1:$NGINX_PORT/api/small.json"

# --- an agent root whose active version whitelists a path on the origin ---------
agent_root "http://127.0.0.1:$UP_PORT/mall/"
start_serve

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

# --- measure ------------------------------------------------------------------
# case_args CASE FRONT -> wrk's script, Host header and URL, one argument a line
case_args() {
    [ "$1" = post ] && printf '%s\n' -s "$WORK/post.lua"
    local path=/api/small.json; [ "$1" = post ] && path=/api/echo
    printf '%s\n' -H "Host: $(front_host "$2")" "http://127.0.0.1:$(front_port "$2")$path"
}
CASES=${CASES:-get post}
for case in $CASES; do measure "$case"; done

printf '\n%-34s %-14s %12s %10s %11s   %s\n' "forwarded request" "front" "requests/s" "p99 ms" "CPU us/req" "(each round: req/s/p99 ms)"
for case in $CASES; do
    label="GET /api/small.json ($(stat -c %s "$WORK/www/api/small.json") B)"; [ "$case" = post ] && label="POST /api/echo (31 B body)"
    for front in ours nginx; do
        shown=offline-agent; [ "$front" = nginx ] && shown="nginx $(nginx_version)"
        printf '%-34s %-14s %12.0f %10.2f %11.1f   %s\n' "$label" "$shown" "${RPS[$front.$case]}" "${P99[$front.$case]}" "${CPU[$front.$case]}" "${ALL[$front.$case]}"
    done
done
echo
for case in $CASES; do verdict "$case" "proxy $case (reported, no target)" 0; done
conditions
exit $STATUS
