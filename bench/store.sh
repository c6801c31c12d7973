#!/usr/bin/env bash
# Install store (issue 33): what a first install and a patch update write, how long
# they take, and the disk two kept versions use, for two builds side by side.
#
#   bench/store.sh OLD.zip NEW.zip PATCH.bsdiff
#
# Environment:
#   OURS=/path/to/offline-agent   build with the object store (default .build/debug/offline-agent)
#   BASE=/path/to/offline-agent   today's build to compare with (required)
#   BASE_ARGS=""                  extra sync arguments for BASE (e.g. --allow-unsigned for builds that need it)
#   OURS_ARGS=""                  the same for OURS (builds since issue 30 need --allow-unsigned: the manifests are not signed)
#   RUNS=3                        runs per build, interleaved (medians reported)
#   CHAIN=1                       also time the by-hand chain curl + bspatch + sha256sum + unzip
#
# Bytes written are `write_bytes` of /proc/PID/io of the sync process, read when it has
# exited but before it is reaped (waitid WNOWAIT): what it made the kernel send to the
# storage layer, page-cache writes included. Disk use is `du -sx` of the root (each inode
# once) after the patch update, against `du -sx` of the extracted new tree alone.
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OURS=${OURS:-$ROOT/.build/debug/offline-agent}
BASE=${BASE:?set BASE to today\'s offline-agent}
RUNS=${RUNS:-3}
CHAIN=${CHAIN:-1}
OLD=$(realpath "$1") NEW=$(realpath "$2") PATCH=$(realpath "$3")
W=$(mktemp -d /tmp/store-bench.XXXXXX)
trap 'kill $HTTP 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/www"
cp "$OLD" "$W/www/old.zip"; cp "$NEW" "$W/www/new.zip"; cp "$PATCH" "$W/www/p.bsdiff"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
printf '{"app":"bench","version":"1.0.0","miniVersion":"1.0.0","isPatch":false,"url":"old.zip","size":%s,"sha256":"%s","packageSha256":"%s","whitelist":["https://bench.example.com/"]}\n' \
  "$(size "$OLD")" "$(sha "$OLD")" "$(sha "$OLD")" > "$W/www/full.json"
printf '{"app":"bench","version":"2.0.0","miniVersion":"1.0.0","isPatch":true,"baseVersion":"1.0.0","url":"p.bsdiff","size":%s,"sha256":"%s","packageSha256":"%s","fullUrl":"new.zip","fullSize":%s,"whitelist":["https://bench.example.com/"]}\n' \
  "$(size "$PATCH")" "$(sha "$PATCH")" "$(sha "$NEW")" "$(size "$NEW")" > "$W/www/patch.json"
PORT=$((20000 + RANDOM % 20000))
(cd "$W/www" && exec python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1) &
HTTP=$!
URL="http://127.0.0.1:$PORT"
for _ in $(seq 100); do curl -sf -o /dev/null "$URL/full.json" && break; sleep 0.05; done

# run_io CMD... -> prints "seconds write_bytes" of the command's own process.
run_io() {
  python3 - "$@" <<'PY'
import os, subprocess, sys, time
start = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
elapsed = time.monotonic() - start
io = dict(line.split(": ") for line in open(f"/proc/{p.pid}/io").read().splitlines())
code = p.wait()
if code != 0: sys.exit(f"command failed ({code}): {sys.argv[1:]}")
print(f"{elapsed:.3f} {int(io['write_bytes'])}")
PY
}

one() {  # one BIN LABEL [ARGS...] -> full_s full_w patch_s patch_w du_root
  local bin=$1 root="$W/root-$2"; shift 2
  rm -rf "$root"; sync
  local full patch
  full=$(run_io "$bin" sync --root "$root" --app bench --manifest "$URL/full.json" --force "$@")
  sync
  patch=$(run_io "$bin" sync --root "$root" --app bench --manifest "$URL/patch.json" --force "$@")
  sync
  [[ -d $root/apps/bench/versions/2.0.0 ]] || { echo "no 2.0.0 from $2" >&2; exit 1; }
  echo "$full $patch $(du -sxb "$root" | cut -f1)"
}

chain() {
  rm -rf "$W/chain"; mkdir -p "$W/chain"; cp "$OLD" "$W/chain/installed.zip"; sync
  local s; s=$(date +%s.%N)
  (cd "$W/chain" && curl -sf -o p.bsdiff "$URL/p.bsdiff" && bspatch installed.zip new.zip p.bsdiff \
    && sha256sum new.zip >/dev/null && unzip -q -o new.zip -d out)
  echo "$(date +%s.%N) - $s" | bc
}

mkdir -p "$W/tree"; unzip -q "$NEW" -d "$W/tree"; TREE=$(du -sxb "$W/tree" | cut -f1)
PKG=$(size "$NEW")
echo "package $PKG bytes, tree $TREE bytes, patch $(size "$PATCH") bytes; $RUNS interleaved runs"
printf '%-6s %9s %12s %9s %12s %12s\n' build full_s full_write patch_s patch_write disk_2_versions
for i in $(seq "$RUNS"); do
  for b in base ours; do
    # shellcheck disable=SC2086
    if [[ $b == ours ]]; then line=$(one "$OURS" ours ${OURS_ARGS:-}); else line=$(one "$BASE" base ${BASE_ARGS:-}); fi
    read -r fs fw ps pw du <<<"$line"
    printf '%-6s %9s %11s%% %9s %11s%% %11sx\n' "$b" "$fs" "$(echo "scale=1; 100*$fw/$PKG" | bc)" "$ps" \
      "$(echo "scale=1; 100*$pw/$PKG" | bc)" "$(echo "scale=2; $du/$TREE" | bc)"
  done
  if [[ $CHAIN == 1 ]]; then printf '%-6s %9s %12s %9s\n' chain - - "$(chain)"; fi
done
echo "(full_write, patch_write: write_bytes of the sync process as % of the package; disk: du of the root after the update / du of one tree)"
