#!/usr/bin/env bash
# The main job, end to end on loopback: build, publish the fixture app, serve it,
# sync (full), publish the next version, sync again (patch), then status and resolve,
# the loopback server, a session-restore URL and the cookie jar.
#
#   OFFLINE_AGENT=/path/to/offline-agent   run the demo with that binary (e.g. the release
#                                          build, or a profiling wrapper: scripts/order-file.sh)
#                                          instead of the debug build
#   DEMO_DIR=DIR                           work there instead of a new /tmp directory
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
OFFLINE_AGENT_BROWSER_TESTS=0 scripts/install-deps.sh

[[ -n ${OFFLINE_AGENT:-} ]] || swift build --product offline-agent
swift build --product offline-publish
swift build --product offline-server
bin="$(swift build --show-bin-path)"
agent="${OFFLINE_AGENT:-$bin/offline-agent}"
publisher="$bin/offline-publish"

work="${DEMO_DIR:-$(mktemp -d /tmp/offline-agent-demo.XXXXXX)}"
publish="$work/publish" root="$work/root"
mkdir -p "$publish"
whitelist="https://h5.example.com/mall/"
echo "== demo in $work"

echo "== keygen"
public_key="$("$publisher" keygen --out "$work/signing.key" --force)"

echo "== publish 1.0.0"
"$publisher" publish --app mall --version 1.0.0 --source fixtures/sample-app/1.0.0 --out "$publish" \
    --whitelist "$whitelist" --key "$work/signing.key"

echo "== start offline-server on a free loopback port"
"$bin/offline-server" --dir "$publish" --port 0 --key "$work/signing.key" >"$work/server.out" 2>"$work/server.log" &
server=$!
local_server=""
trap 'kill $server $local_server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
address="$(sed -n 's/^listening on //p' "$work/server.out")"
manifest="http://$address/manifest"
echo "   serving $publish at http://$address"

sync() { "$agent" sync --root "$root" --app mall --manifest "$manifest" --public-key "$public_key" --json "$@"; }

echo "== sync (nothing installed: full package)"
sync

echo "== publish 1.1.0"
"$publisher" publish --app mall --version 1.1.0 --source fixtures/sample-app/1.1.0 --out "$publish" --key "$work/signing.key"

echo "== sync again (within 5 minutes: throttled)"
sync
echo "== sync --force (1.0.0 installed: patch)"
sync --force

echo "== status"
"$agent" status --root "$root"

echo "== resolve ${whitelist}index.html"
file="$("$agent" resolve --root "$root" "${whitelist}index.html")"
echo "$file"
grep -o '<title>[^<]*</title>' "$file" || head -c 300 "$file"

echo "== serve: the loopback server a web view loads pages through"
"$agent" serve --root "$root" --port 0 >"$work/serve.out" 2>"$work/serve.log" &
local_server=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
local_url="$(sed -n 's/^listening on //p' "$work/serve.out")"
curl -s -o /dev/null -w "GET /open?url=${whitelist}index.html -> %{http_code} %{redirect_url}\n" \
    "$local_url/open?url=${whitelist}index.html"
curl -s -o /dev/null -w "GET /open?url=https://elsewhere.example.com/ -> %{http_code} %{redirect_url}\n" \
    "$local_url/open?url=https://elsewhere.example.com/"
curl -s -D - -o /dev/null "$local_url/mall/index.html" | grep -i -E '^(HTTP|content-type|x-offline-version)'
# A reload: the page's bytes are kept now, and the event loop answers it from memory.
curl -s -o /dev/null -w "GET /mall/index.html again -> %{http_code}\n" "$local_url/mall/index.html"

echo "== session-url: restore a web view's back/forward list (the middle page current)"
local_port="${local_url##*:}"
restore="$("$agent" session-url --port "$local_port" --current -1 \
    "${whitelist}index.html" "${whitelist}pages/about.html" "https://elsewhere.example.com/")"
echo "$restore"
curl -s -o /dev/null -w "GET /session/restore -> %{http_code} %{content_type}\n" "$restore"
curl -s -o /dev/null -w "GET /session/item?url=${whitelist}pages/about.html -> %{http_code} %{redirect_url}\n" \
    "$local_url/session/item?url=${whitelist}pages/about.html"

echo "== cookies the syncs kept (profile 'default'; values masked)"
"$agent" cookies --root "$root"
echo "== done: the page is served from $file and from $local_url/mall/"
