# Shared by bench/serve.sh and bench/proxy.sh (sourced after each sets NAME and its own
# defaults), and by bench/run.sh for reading wrk's output: one copy of the set-up, the
# serve launcher, the wrk figures and the medians.
# shellcheck shell=bash

# wrk_figures LOG_FILE WRK_ARGS... -> "req/s p99_ms errors" (errors: "-" when none).
# Runs wrk with --latency, appends its whole output to LOG_FILE, and reads the rate, the
# 99th percentile in ms (wrk prints us, ms, s or m) and any non-2xx/3xx or socket error.
wrk_figures() {
    local log=$1 out rps p99 errors
    shift
    out=$(wrk --latency "$@")
    printf '%s\n' "$out" >> "$log"
    rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')
    p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {
        v = $2; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v);
        if (unit == "us") v /= 1000; else if (unit == "s") v *= 1000; else if (unit == "m") v *= 60000;
        printf "%.3f", v }')
    errors=$(printf '%s\n' "$out" | awk '/Non-2xx or 3xx responses:/ { printf "non-2xx:%s,", $5 } /Socket errors:/ { printf "socket-errors," }')
    echo "$rps $p99 ${errors:--}"
}

# The rest is for the standalone side-by-side scripts (serve.sh, proxy.sh).
[[ -n ${NAME:-} ]] || return 0

DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
BUILD=${BUILD:-auto}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
NGINX=${NGINX:-/usr/sbin/nginx}
TARGET=0.5

die() { printf '%s.sh: error: %s\n' "$NAME" "$*" >&2; exit 1; }
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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-$NAME.XXXXXX")
chmod 755 "$WORK"   # nginx's workers run as an unprivileged user when started by root
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# agent_root WHITELIST_PREFIX: $AGENT, with app `mall` active at 1.0.0 (the fixture app,
# in $VERSION_DIR) whitelisting WHITELIST_PREFIX.
agent_root() {
    AGENT="$WORK/agent"
    VERSION_DIR="$AGENT/apps/mall/versions/1.0.0"
    mkdir -p "$AGENT/apps/mall/versions" "$AGENT/apps/mall/packages" "$AGENT/apps/mall/downloads"
    cp -R "$ROOT/fixtures/sample-app/1.0.0" "$VERSION_DIR"
    cat > "$AGENT/apps/mall/versions/1.0.0.json" <<JSON
{"installedAt": "2024-01-01T00:00:00Z", "miniVersion": "1.0.0", "packageSha256": "0000000000000000000000000000000000000000000000000000000000000000",
 "rollout": 100, "version": "1.0.0", "via": "full", "whitelist": ["$1"]}
JSON
    ln -s versions/1.0.0 "$AGENT/apps/mall/current"
    echo bench-device > "$AGENT/device-id"
}

# start_serve: `offline-agent serve` over $AGENT on a free port -> $OURS_PORT, $OURS_PID.
start_serve() {
    : > "$WORK/ours.out"   # exists before the server's shell opens it, for the poll below
    "$OURS" serve --root "$AGENT" --port 0 > "$WORK/ours.out" 2> "$WORK/ours.err" &
    OURS_PID=$!
    PIDS+=("$OURS_PID")
    OURS_PORT=
    for _ in $(seq 1 100); do
        OURS_PORT=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$WORK/ours.out")
        [ -n "$OURS_PORT" ] && break
        sleep 0.1
    done
    [ -n "$OURS_PORT" ] || die "offline-agent serve did not start: $(cat "$WORK/ours.err")"
}

# start_nginx URL [INSTANCE]: nginx, not daemonized, with $WORK/INSTANCE/nginx.conf
# (INSTANCE: `nginx`, the front measured, unless named); waits for URL to answer.
start_nginx() {
    local dir=$WORK/${2:-nginx}
    "$NGINX" -c "$dir/nginx.conf" -p "$dir" 2> "$dir/stderr" &
    PIDS+=($!)
    for _ in $(seq 1 100); do
        curl -sf -o /dev/null "$1" && return 0
        sleep 0.1
    done
    die "nginx did not answer $1: $(cat "$dir/stderr" "$dir/error.log" 2>/dev/null)"
}

# nginx_conf [INSTANCE] < HTTP_BLOCK_BODY: $WORK/INSTANCE/nginx.conf (default `nginx`),
# one process tree in that directory, no access log, long keep-alive; the script's
# servers are read from standard input.
nginx_conf() {
    local dir=$WORK/${1:-nginx}
    mkdir -p "$dir"
    {
        cat <<CONF
daemon off;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
CONF
        local kind
        for kind in client_body:body proxy fastcgi uwsgi scgi; do
            printf '    %s_temp_path %s;\n' "${kind%%:*}" "$dir/${kind#*:}"
        done
        cat
        echo "}"
    } > "$dir/nginx.conf"
}

# json_origin PORT [EXTRA_SERVER_LINES]: the origin a mirrored host forwards to, an nginx
# of its own (instance `origin`) on PORT serving $WORK/www, with /api/small.json (537 B of
# JSON); started, and waited for.
json_origin() {
    mkdir -p "$WORK/www/api"
    python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item %d" % i, "price": i * 1.5} for i in range(12)]}))' \
        > "$WORK/www/api/small.json"
    nginx_conf origin <<CONF
    default_type application/json;
    server {
        listen 127.0.0.1:$1;
        root $WORK/www;
        ${2:-}
    }
CONF
    start_nginx "http://127.0.0.1:$1/api/small.json" origin
}

# static_nginx PORT LOCATION_LINES URL: the reference static server (the front measured),
# sendfile on as nginx is deployed, mime types from Debian's list; started, and waited
# for on URL.
static_nginx() {
    nginx_conf <<CONF
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    server {
        listen 127.0.0.1:$1;
        $2
    }
CONF
    start_nginx "$3"
}

# wrk_run LABEL WRK_ARGS... -> "req/s p99_ms"; any error in the run ends the script.
wrk_run() {
    local label=$1 rps p99 errors
    shift
    read -r rps p99 errors < <(wrk_figures "$WORK/wrk.log" -t"$THREADS" -c"$CONNECTIONS" "$@")
    [ "$errors" = - ] || die "wrk reported errors for $label: $errors (see $WORK/wrk.log)"
    echo "$rps $p99"
}

# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# front_cpu FRONT -> CPU time (clock ticks, user + system) the front's server processes
# have used so far: ours, or nginx's master and workers.
front_cpu() {
    local pids pid total=0 master
    if [ "$1" = ours ]; then
        pids=$OURS_PID
    else
        master=$(cat "$WORK/nginx/nginx.pid")
        pids="$master $(pgrep -P "$master" | tr '\n' ' ')"
    fi
    for pid in $pids; do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}

# wrk's DURATION in seconds (it takes 10s, 2m, 1h).
duration_seconds() {
    case $DURATION in
        *m) echo $(( ${DURATION%m} * 60 )) ;;
        *h) echo $(( ${DURATION%h} * 3600 )) ;;
        *) echo "${DURATION%s}" ;;
    esac
}

# measure CASE: warm-up, then ROUNDS rounds alternating `ours` and `nginx` (a load change
# on the machine hits both alike), through the script's `case_args CASE FRONT`
# (the wrk arguments after -t/-c) -> RPS[front.case], P99[front.case] and
# CPU[front.case] medians, ALL[front.case] each round's "req/s/p99". CPU is the server's
# CPU microseconds per request: what its processes used over the round (`front_cpu`),
# over the requests wrk counted; on a machine wrk shares, it is the figure that does not
# depend on how the cores are split between them.
declare -A RPS P99 ALL CPU
measure() {
    local case=$1 front round rps p99 args before after
    local -A rounds_rps rounds_p99 rounds_cpu
    local ticks seconds
    ticks=$(getconf CLK_TCK) seconds=$(duration_seconds)
    for front in ours nginx; do
        log "$front $case: warm-up 3s"
        mapfile -t args < <(case_args "$case" "$front")
        wrk_run "$front $case" -d3s "${args[@]}" > /dev/null
    done
    for round in $(seq 1 "$ROUNDS"); do
        for front in ours nginx; do
            log "$front $case: round $round/$ROUNDS, $DURATION, $THREADS thread(s), $CONNECTIONS connections"
            mapfile -t args < <(case_args "$case" "$front")
            before=$(front_cpu "$front")
            read -r rps p99 < <(wrk_run "$front $case" -d"$DURATION" "${args[@]}")
            after=$(front_cpu "$front")
            rounds_rps[$front]+="$rps " rounds_p99[$front]+="$p99 "
            rounds_cpu[$front]+="$(awk -v t="$((after - before))" -v k="$ticks" -v r="$rps" -v s="$seconds" \
                'BEGIN { printf "%.1f", t / k * 1e6 / (r * s) }') "
            ALL[$front.$case]+="$rps/$p99 "
        done
    done
    for front in ours nginx; do
        # shellcheck disable=SC2086  # word lists
        RPS[$front.$case]=$(median ${rounds_rps[$front]}) P99[$front.$case]=$(median ${rounds_p99[$front]})
        # shellcheck disable=SC2086
        CPU[$front.$case]=$(median ${rounds_cpu[$front]})
    done
}

# verdict CASE LABEL [TARGET] -> "# PASS|FAIL LABEL: ..." line (TARGET: the least
# ratio of our rate to nginx's, $TARGET unless given); sets STATUS=1 on a miss.
STATUS=0
verdict() {
    local case=$1 label=$2 target=${3:-$TARGET} ratio p99ratio result=PASS
    ratio=$(awk -v a="${RPS[ours.$case]}" -v b="${RPS[nginx.$case]}" 'BEGIN { printf "%.2f", a / b }')
    p99ratio=$(awk -v a="${P99[ours.$case]}" -v b="${P99[nginx.$case]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    awk -v r="$ratio" -v t="$target" 'BEGIN { exit !(r >= t) }' || { result=FAIL; STATUS=1; }
    echo "# $result $label: offline-agent/nginx requests/s = $ratio (target >= $target); p99 ours ${P99[ours.$case]} ms, nginx ${P99[nginx.$case]} ms (ratio $p99ratio); CPU per request ours ${CPU[ours.$case]} us, nginx ${CPU[nginx.$case]} us"
}

# The closing line of both scripts.
conditions() {
    echo "# medians of $ROUNDS alternating rounds of wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(uname -sr)"
}

nginx_version() { "$NGINX" -v 2>&1 | sed 's|.*/||'; }
