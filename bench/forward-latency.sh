#!/usr/bin/env bash
# Forward latency: the time `offline-agent serve` adds to one forwarded GET, at one
# client. The origin is an nginx answering GET /api/small.json from a file (537 B, as in
# bench/proxy.sh); the agent root's active version whitelists `<origin>/mall/`, so the
# path is on the mirrored origin and not in the package: `serve` forwards it. One
# keep-alive client (python3 http.client, one connection per front, each request read
# whole before the next) sends REQUESTS sequential GETs per round, alternating rounds:
# through the mirror host (`Host: 127.0.0.1.http-PORT.localhost:SERVE_PORT`), then
# directly to the origin. Latencies of all rounds are pooled per front; the script prints
# p50 and p99 of each and their differences: what forwarding through `serve` adds.
# The client's own cost is in both and cancels out of the difference.
# Target: p50 added <= 1 ms (p99 reported).
#
#   bench/forward-latency.sh
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   REQUESTS=1000                 sequential requests per round and front (after 200 untimed)
#   ROUNDS=7                      rounds per front, alternating
#   NGINX=/usr/sbin/nginx         nginx binary (Debian nginx-light is enough)
#   KEEP=1                        keep the scratch directory
#
# Needs nginx, curl, python3; exits 1 when the target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=forward-latency ROUNDS=${ROUNDS:-7}   # before lib.sh, whose default is 3
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

REQUESTS=${REQUESTS:-1000}
TARGET_P50_ADDED_MS=1
need python3

# --- the origin: nginx ----------------------------------------------------------
UP_PORT=$(free_port)
MIRROR="127.0.0.1.http-$UP_PORT.localhost"
json_origin "$UP_PORT"

# --- serve, mirroring it ----------------------------------------------------------
agent_root "http://127.0.0.1:$UP_PORT/mall/"
start_serve
curl -sf -D "$WORK/headers" -H "Host: $MIRROR:$OURS_PORT" "http://127.0.0.1:$OURS_PORT/api/small.json" -o "$WORK/check" \
    || die "GET /api/small.json on the mirror host failed: $(cat "$WORK/ours.err")"
cmp -s "$WORK/check" "$WORK/www/api/small.json" || die "the forwarded /api/small.json differs from the origin's"
grep -qi '^x-offline-source: origin' "$WORK/headers" || die "/api/small.json was not forwarded: $(cat "$WORK/headers")"

# --- measure ----------------------------------------------------------------------
cat > "$WORK/client.py" <<'PY'
import http.client, json, sys, time
# client.py PORT HOST_HEADER REQUESTS EXPECTED_BODY_FILE OUT_FILE [SOURCE]
port, host, count, expected_file, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
source = sys.argv[6] if len(sys.argv) > 6 else None
expected = open(expected_file, "rb").read()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
headers = {"Host": host, "Accept": "application/json", "User-Agent": "bench-forward-latency"}
def one():
    conn.request("GET", "/api/small.json", headers=headers)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200 or body != expected:
        sys.exit("unexpected answer: %d, %d bytes" % (r.status, len(body)))
    if source and (r.getheader("X-Offline-Source") or "").lower() != source:
        sys.exit("X-Offline-Source: %r, not %s" % (r.getheader("X-Offline-Source"), source))
    if r.will_close:
        sys.exit("the server closed the connection: not kept alive")
for _ in range(200):
    one()
samples = []
for _ in range(count):
    t = time.perf_counter_ns()
    one()
    samples.append(time.perf_counter_ns() - t)
conn.close()
with open(out, "a") as f:
    f.write("\n".join("%.1f" % (s / 1000) for s in samples) + "\n")
PY
# pct FILE P -> the P-th percentile (nearest rank) of the microsecond samples in FILE
pct() { sort -g "$1" | awk -v p="$2" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; printf "%.1f", v[i] }'; }

declare -A ROUND_P50 ROUND_P99
for round in $(seq 1 "$ROUNDS"); do
    for front in ours direct; do
        if [ "$front" = ours ]; then
            args=("$OURS_PORT" "$MIRROR:$OURS_PORT" "$REQUESTS" "$WORK/www/api/small.json" "$WORK/round" origin)
        else
            args=("$UP_PORT" "127.0.0.1:$UP_PORT" "$REQUESTS" "$WORK/www/api/small.json" "$WORK/round")
        fi
        : > "$WORK/round"
        timeout 300 python3 "$WORK/client.py" "${args[@]}" || die "$front: round $round failed"
        cat "$WORK/round" >> "$WORK/$front.us"
        ROUND_P50[$front]+="$(pct "$WORK/round" 50) " ROUND_P99[$front]+="$(pct "$WORK/round" 99) "
        log "round $round/$ROUNDS $front: p50 $(pct "$WORK/round" 50) us, p99 $(pct "$WORK/round" 99) us"
    done
done

printf '\n%-40s %10s %10s   %s\n' "GET /api/small.json ($(stat -c %s "$WORK/www/api/small.json") B), one client" "p50 us" "p99 us" "(each round: p50/p99 us)"
declare -A P50 P99
for front in ours direct; do
    P50[$front]=$(pct "$WORK/$front.us" 50) P99[$front]=$(pct "$WORK/$front.us" 99)
    shown="through serve's mirror host"; [ "$front" = direct ] && shown="directly to the origin (nginx $(nginx_version))"
    # shellcheck disable=SC2206  # word lists
    p50s=(${ROUND_P50[$front]}) p99s=(${ROUND_P99[$front]})
    rounds=""; for i in "${!p50s[@]}"; do rounds+="${p50s[$i]}/${p99s[$i]} "; done
    printf '%-40s %10s %10s   %s\n' "$shown" "${P50[$front]}" "${P99[$front]}" "$rounds"
done
ADDED_P50=$(awk -v a="${P50[ours]}" -v b="${P50[direct]}" 'BEGIN { printf "%.3f", (a - b) / 1000 }')
ADDED_P99=$(awk -v a="${P99[ours]}" -v b="${P99[direct]}" 'BEGIN { printf "%.3f", (a - b) / 1000 }')
echo
result=PASS
awk -v a="$ADDED_P50" -v t="$TARGET_P50_ADDED_MS" 'BEGIN { exit !(a <= t) }' || { result=FAIL; STATUS=1; }
echo "# $result forward latency p50 added: $ADDED_P50 ms (through serve ${P50[ours]} us, direct ${P50[direct]} us; target <= $TARGET_P50_ADDED_MS ms)"
echo "# REPORTED forward latency p99 added: $ADDED_P99 ms (through serve ${P99[ours]} us, direct ${P99[direct]} us)"
echo "# $((ROUNDS * REQUESTS)) sequential keep-alive GETs per front ($ROUNDS alternating rounds of $REQUESTS, after 200 untimed each), python3 http.client; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(uname -sr)"
exit $STATUS
