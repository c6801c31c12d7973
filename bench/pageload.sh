#!/usr/bin/env bash
# Page load in headless Chromium: a real front end of 300+ files, installed as the active
# version of a package and loaded through its mirror host (`http://<origin's mirror
# host>:PORT/pageload.html`, docs/PROTOCOL.md "Mirrored origins"), against nginx serving
# the same directory (the same nginx is the origin the whitelist names, so anything the
# package did not serve would be forwarded to it: nothing is, see the check below).
#
# The front end: the `static/` directory of the streamlit wheel (PyPI; 347 files, 22 MiB,
# the same tree `bench/run.sh prepare` uses), plus a generated `pageload.html` that loads
# every one of its files: each JS file as `<script type="module">` (so the modules'
# imports load and run as in the app), each CSS file as a stylesheet, each font as
# `<link rel=preload as=font>`, each image as `<img>`. Its first script writes, in the
# `load` handler, the navigation entry's `loadEventStart` (ms from the start of the
# navigation: the browser's own start-up is not in it), the number of resources, how
# many of them went to the network (`transferSize > 0`) and the bytes transferred into
# the DOM, which `chromium --headless=new --dump-dom` prints.
#
# A run is a fresh profile (`--user-data-dir` new): the cold load, then a second Chromium
# on the same profile: the warm load (its HTTP cache as the first left it). serve sends
# `Cache-Control: no-cache` on package files (a swap must show at once), so its warm load
# revalidates every file (304s); the table says how many requests each load sent. Runs alternate
# ours, nginx, ours, nginx...; medians of RUNS runs. Target: ours <= 1.10x nginx, cold
# and warm.
#
#   bench/pageload.sh
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   RUNS=7                        alternating runs per server (each a cold and a warm load)
#   FRONTEND=DIR                  serve this directory instead of the streamlit static tree
#   CACHE=bench/work              where the wheel is downloaded and unpacked (bench/run.sh's WORK)
#   STREAMLIT=1.65.0              the streamlit version
#   CHROMIUM=chromium             the browser
#   NGINX=/usr/sbin/nginx         nginx binary (Debian nginx-light is enough)
#   NGINX_NO_CACHE=1              nginx adds `Cache-Control: no-cache`, as serve does on package
#                                 files, so its warm load revalidates every file too (by default
#                                 it sends only ETag and Last-Modified, and Chromium's heuristic
#                                 freshness reuses its files without asking)
#   KEEP=1                        keep the scratch directory
#
# Needs chromium, nginx, curl, python3 (and pip on the first run); prints a table, the
# ratios and PASS/FAIL lines, and exits 1 when a target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=pageload
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

RUNS=${RUNS:-7}
CACHE=${CACHE:-$ROOT/bench/work}
STREAMLIT=${STREAMLIT:-1.65.0}
CHROMIUM=${CHROMIUM:-chromium}
TARGET_RATIO=1.10
LOAD_TIMEOUT=120   # seconds, one Chromium process
need "$CHROMIUM" chromium
need python3

# --- the front end ---------------------------------------------------------------
if [ -z "${FRONTEND:-}" ]; then
    FRONTEND="$CACHE/tree/streamlit-$STREAMLIT"
    if [ ! -d "$FRONTEND" ]; then
        need pip python3-pip
        need unzip
        mkdir -p "$CACHE/wheels" "$CACHE/tree"
        whl=$(ls "$CACHE/wheels/streamlit-$STREAMLIT-"*.whl 2>/dev/null | head -n1 || true)
        if [ -z "$whl" ]; then
            log "pip download streamlit==$STREAMLIT (wheel only, into $CACHE/wheels)"
            pip download -q --no-deps --only-binary=:all: -d "$CACHE/wheels" "streamlit==$STREAMLIT" >&2
            whl=$(ls "$CACHE/wheels/streamlit-$STREAMLIT-"*.whl | head -n1)
        fi
        rm -rf "$FRONTEND.tmp"
        unzip -q -o "$whl" 'streamlit/static/*' -d "$FRONTEND.tmp"
        mv "$FRONTEND.tmp/streamlit/static" "$FRONTEND"
        rm -rf "$FRONTEND.tmp"
    fi
fi
[ -d "$FRONTEND" ] || die "no front end at $FRONTEND"

# --- an origin (nginx, also the reference) and an agent root mirroring it ----------
NGINX_PORT=$(free_port)
ORIGIN="http://127.0.0.1:$NGINX_PORT"
MIRROR="127.0.0.1.http-$NGINX_PORT.localhost"
agent_root "$ORIGIN/"
rm -rf "$VERSION_DIR"
cp -R --preserve=timestamps "$FRONTEND" "$VERSION_DIR"   # as deployed: nginx's Last-Modified is the files'
find "$VERSION_DIR" -type d -exec chmod 755 {} + && find "$VERSION_DIR" -type f -exec chmod 644 {} +

python3 - "$VERSION_DIR" <<'PY'
import os, sys
root = sys.argv[1]
files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
head, body = [], []
for p in files:
    u = "./" + p
    ext = p.rsplit(".", 1)[-1].lower()
    if ext in ("js", "mjs"):
        head.append('<script type="module" src="%s"></script>' % u)
    elif ext == "css":
        head.append('<link rel="stylesheet" href="%s">' % u)
    elif ext in ("woff2", "woff", "ttf"):
        head.append('<link rel="preload" as="font" type="font/%s" crossorigin href="%s">' % (ext, u))
    elif ext in ("png", "gif", "svg", "jpg", "jpeg", "webp", "ico"):
        body.append('<img src="%s" width="1" height="1" alt="">' % u)
page = """<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8"><title>pageload</title>
<script>
performance.setResourceTimingBufferSize(100000);
addEventListener("load", function () {
  var n = performance.getEntriesByType("navigation")[0];
  var r = performance.getEntriesByType("resource");
  var net = r.filter(function (e) { return e.transferSize > 0; });
  document.getElementById("pageload-result").textContent =
    "load=" + n.loadEventStart.toFixed(1) + " resources=" + r.length + " network=" + net.length +
    " transfer=" + r.reduce(function (a, e) { return a + e.transferSize; }, 0);
});
</script>
%s
</head><body><pre id="pageload-result">pending</pre>
%s
</body></html>
""" % ("\n".join(head), "\n".join(body))
open(os.path.join(root, "pageload.html"), "w").write(page)
print(len(head) + len(body), file=sys.stderr)
PY
FILES=$(find "$VERSION_DIR" -type f | wc -l)
BYTES=$(du -sb "$VERSION_DIR" | cut -f1)
LOADED=$(grep -c -E '^<(script type="module"|link|img)' "$VERSION_DIR/pageload.html")
log "front end: $FILES files, $BYTES bytes; pageload.html loads $LOADED of them"

static_nginx "$NGINX_PORT" "root $VERSION_DIR; etag on;$(if [ "${NGINX_NO_CACHE:-0}" = 1 ]; then printf ' add_header Cache-Control no-cache;'; fi)" \
    "$ORIGIN/pageload.html"
dd if="$OURS" iflag=nocache count=0 status=none
start_serve

OURS_URL="http://$MIRROR:$OURS_PORT/pageload.html"
NGINX_URL="$ORIGIN/pageload.html"

# --- both serve the same bytes, ours from the package ----------------------------
for path in pageload.html $(cd "$VERSION_DIR" && find . -type f -name '*.js' | sort | sed -n '1p;100p;200p'); do
    path=${path#./}
    for front in ours nginx; do
        url=$OURS_URL; [ "$front" = nginx ] && url=$NGINX_URL
        url=${url%pageload.html}$path
        curl -sf -D "$WORK/headers" "$url" -o "$WORK/check" --resolve "$MIRROR:$OURS_PORT:127.0.0.1" \
            || die "$front: GET $url failed"
        cmp -s "$WORK/check" "$VERSION_DIR/$path" || die "$front: $url differs from the file"
        if [ "$front" = ours ]; then
            grep -qi '^x-offline-source: package' "$WORK/headers" || die "ours: $url was not served from the package: $(cat "$WORK/headers")"
        fi
    done
done

# --- Chromium ------------------------------------------------------------------
CHROME_FLAGS=(--headless=new --disable-gpu --no-first-run --no-default-browser-check
    --disable-extensions --disable-background-networking --disable-component-update
    --disable-sync --disable-default-apps --mute-audio --password-store=basic)
[ "$(id -u)" = 0 ] && CHROME_FLAGS+=(--no-sandbox)

# load URL PROFILE -> "load_ms resources network transfer"
load() {
    local url=$1 profile=$2 out
    out=$(timeout "$LOAD_TIMEOUT" "$CHROMIUM" "${CHROME_FLAGS[@]}" --user-data-dir="$profile" \
        --dump-dom "$url" 2>> "$WORK/chromium.err") || die "chromium failed or timed out on $url (see $WORK/chromium.err)"
    printf '%s\n' "$out" | sed -n 's|.*<pre id="pageload-result">load=\([0-9.]*\) resources=\([0-9]*\) network=\([0-9]*\) transfer=\([0-9]*\)</pre>.*|\1 \2 \3 \4|p' |
        grep . || die "no load event recorded on $url: $(printf '%s\n' "$out" | grep -o '<pre id="pageload-result">[^<]*')"
}

declare -A TIMES INFO
for front in ours nginx; do   # one untimed warm-up each: the page cache, the binaries
    url=$OURS_URL; [ "$front" = nginx ] && url=$NGINX_URL
    log "$front: warm-up load"
    load "$url" "$WORK/profile-warmup-$front" > /dev/null
    rm -rf "$WORK/profile-warmup-$front"
done
for run in $(seq 1 "$RUNS"); do
    for front in ours nginx; do
        url=$OURS_URL; [ "$front" = nginx ] && url=$NGINX_URL
        profile="$WORK/profile-$front-$run"
        for kind in cold warm; do
            read -r ms resources network transfer < <(load "$url" "$profile")
            [ "$resources" -ge "$LOADED" ] || die "$front $kind: only $resources resources loaded of $LOADED"
            TIMES[$front.$kind]+="$ms "
            INFO[$front.$kind]="$resources resources, $network from the network, $transfer B"
            log "run $run/$RUNS $front $kind: load $ms ms ($resources resources, $network from the network, $transfer B)"
        done
        rm -rf "$profile"
    done
done

printf '\n%-6s %-14s %10s   %-48s %s\n' load server "median ms" "last run" "(each run, ms)"
declare -A MEDIAN
for kind in cold warm; do
    for front in ours nginx; do
        # shellcheck disable=SC2086  # word list
        MEDIAN[$front.$kind]=$(median ${TIMES[$front.$kind]})
        shown=offline-agent; [ "$front" = nginx ] && shown="nginx $(nginx_version)"
        printf '%-6s %-14s %10.1f   %-48s %s\n' "$kind" "$shown" "${MEDIAN[$front.$kind]}" "${INFO[$front.$kind]}" "${TIMES[$front.$kind]}"
    done
done
echo
for kind in cold warm; do
    ratio=$(awk -v a="${MEDIAN[ours.$kind]}" -v b="${MEDIAN[nginx.$kind]}" 'BEGIN { printf "%.2f", a / b }')
    result=PASS
    awk -v r="$ratio" -v t="$TARGET_RATIO" 'BEGIN { exit !(r <= t) }' || { result=FAIL; STATUS=1; }
    echo "# $result pageload $kind: time to the load event, offline-agent (mirror host) ${MEDIAN[ours.$kind]} ms, nginx ${MEDIAN[nginx.$kind]} ms, ratio $ratio (target <= $TARGET_RATIO)"
done
nginx_cache="nginx: ETag and Last-Modified only"; [ "${NGINX_NO_CACHE:-0}" = 1 ] && nginx_cache="nginx: Cache-Control: no-cache, as serve"
echo "# $LOADED files ($FILES in the package, $BYTES bytes) loaded by one page ($nginx_cache); medians of $RUNS alternating runs of $("$CHROMIUM" --version 2>/dev/null | head -n1) --headless=new; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(uname -sr)"
exit $STATUS
