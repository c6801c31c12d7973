#!/usr/bin/env bash
# Proves the library works as a dependency, the way an app developer adds it: builds
# examples/host-app (and docs/LIBRARY.md's library example beside it) against a throw-away
# clone of this repository at HEAD, tagged with AgentVersion.current and reached through
# the canonical git URL (a SwiftPM mirror in a scratch copy; nothing is written into the
# repository), then runs host-app against the fixture app published and served by the
# built tools: it must sync, resolve to a file with the published bytes, and serve it
# in-process through /open.
#
# Needs the tools built (`swift build`; scripts/test.sh runs this after the tests).
# HOST_APP_WORK=DIR keeps the scratch files there (and its build, for a warm rerun).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
repo="$PWD"
canonical="https://github.com/offline-agent/offline-agent.git"
app=mall
whitelist="https://h5.example.com/mall/"
fixture="$repo/fixtures/sample-app/1.0.0"

fail() { echo "test-host-app: FAIL: $*" >&2; exit 1; }
step() { echo "== test-host-app: $*"; }
started=$SECONDS

version="$(sed -n 's/.*static let current = "\([^"]*\)".*/\1/p' Sources/OfflineAgent/Agent/AgentVersion.swift)"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "cannot read AgentVersion.current (got '$version')"
bin="$(swift build --show-bin-path)"
for tool in offline-publish offline-server; do
    [[ -x "$bin/$tool" ]] || fail "$bin/$tool is missing: run 'swift build' first"
done

work="${HOST_APP_WORK:-$(mktemp -d /tmp/offline-agent-host-app.XXXXXX)}"
mkdir -p "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [[ -n "${HOST_APP_WORK:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

step "clone HEAD ($(git rev-parse --short HEAD)) and tag it $version"
# Named by its commit: SwiftPM remembers which commit a URL's tag named, and a kept
# work directory (HOST_APP_WORK) must not see the tag move under the same URL.
# The folder itself is named offline-agent: SwiftPM takes the package's identity from it.
clone="$work/clone-$(git rev-parse --short=12 HEAD)/offline-agent"
rm -rf "$work"/clone-* "$work/host-app"
git clone -q --no-tags --no-hardlinks "$repo" "$clone"
git -C "$clone" checkout -q --detach "$(git rev-parse HEAD)"
git -C "$clone" tag "$version"

step "scratch copy of examples/host-app, $canonical mirrored to the clone"
cp -R "$clone/examples/host-app" "$work/host-app"
package="$work/host-app"
rm -rf "$package/.build" "$package/.swiftpm" "$package/Package.resolved"
swift package --package-path "$package" config set-mirror --original "$canonical" --mirror "file://$clone"

# The library example of docs/LIBRARY.md, compiled as written: its first swift block
# that starts with an import, as a second executable of the scratch package.
mkdir -p "$package/Sources/readme-example"
awk '!inblock && /^```swift$/ {inblock = 1; block = ""; next}
     inblock && /^```$/ {inblock = 0; if (block ~ /^import /) {printf "%s", block; exit}; next}
     inblock {block = block $0 "\n"}' "$clone/docs/LIBRARY.md" >"$package/Sources/readme-example/main.swift"
[[ -s "$package/Sources/readme-example/main.swift" ]] || fail "no swift block starting with an import in docs/LIBRARY.md"
cat >>"$package/Package.swift" <<'SWIFT'

// Added by scripts/test-host-app.sh: docs/LIBRARY.md's library example, as written.
package.targets.append(.executableTarget(
    name: "readme-example",
    dependencies: [.product(name: "OfflineAgent", package: "offline-agent")]
))
SWIFT

step "build (dependencies from the tagged clone, scratch path $work/build)"
build_started=$SECONDS
# A kept work directory reuses the dependencies' build, never the previous resolution.
rm -rf "$work/build/workspace-state.json"
# A cold build of the example and its dependencies takes minutes (about 5 on two
# cores): say so, and show that it moves, instead of minutes of silence.
echo "   (a cold build takes about 5 minutes; progress every 30 s, log $work/build.log)"
( while sleep 30; do
      echo "   ... building: $(grep -c '^\[' "$work/build.log" 2>/dev/null || echo 0) steps done, $(tail -1 "$work/build.log" 2>/dev/null | cut -c1-80)"
  done ) &
progress=$!
pids+=("$progress")
if ! timeout 2400 swift build --package-path "$package" --scratch-path "$work/build" --disable-dependency-cache \
    >"$work/build.log" 2>&1; then
    kill "$progress" 2>/dev/null || true
    tail -40 "$work/build.log" >&2
    fail "swift build of host-app failed (log: $work/build.log)"
fi
kill "$progress" 2>/dev/null || true
grep "$package/Sources/.*warning:" "$work/build.log" | sort -u | head -20 || true   # the examples' own warnings
# The pin of the canonical URL (found by its location, whatever identity SwiftPM gives it).
pin="$(grep -A5 "\"location\" : \"$canonical\"" "$package/Package.resolved" || true)"
grep -q "\"version\" : \"$version\"" <<<"$pin" \
    || fail "offline-agent did not resolve to $version: $(cat "$package/Package.resolved")"
grep -q "\"revision\" : \"$(git -C "$clone" rev-parse HEAD)\"" <<<"$pin" \
    || fail "offline-agent did not resolve to the tagged commit: $(cat "$package/Package.resolved")"
echo "   built in $((SECONDS - build_started)) s"
host_app="$(swift build --package-path "$package" --scratch-path "$work/build" --show-bin-path)/host-app"

step "publish $fixture and serve it with offline-server"
publish="$work/publish" root="$work/root"
rm -rf "$publish" "$root"
mkdir -p "$publish"
public_key="$("$bin/offline-publish" keygen --out "$work/signing.key" --force)"
timeout 60 "$bin/offline-publish" publish --app "$app" --version 1.0.0 --source "$fixture" --out "$publish" \
    --whitelist "$whitelist" --key "$work/signing.key" >/dev/null
"$bin/offline-server" --dir "$publish" --port 0 --key "$work/signing.key" >"$work/server.out" 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
address="$(sed -n 's/^listening on //p' "$work/server.out")"
[[ -n "$address" ]] || fail "offline-server did not start: $(cat "$work/server.log")"

step "host-app: sync and resolve"
timeout 60 "$host_app" "$root" "$app" "http://$address/manifest" "${whitelist}index.html" --public-key "$public_key" \
    | tee "$work/host-app.out" || fail "host-app exited with status $?"
grep -q '^synced: updated 1.0.0$' "$work/host-app.out" || fail "host-app did not install 1.0.0"
file="$(sed -n 's/^file: //p' "$work/host-app.out")"
[[ -n "$file" && -f "$file" ]] || fail "host-app printed no file that exists"
cmp "$file" "$fixture/index.html" || fail "$file differs from the published $fixture/index.html"

step "host-app --serve: the loopback server in-process, /open"
timeout 60 "$host_app" "$root" "$app" "http://$address/manifest" "${whitelist}pages/about.html" --serve \
    >"$work/serve.out" 2>"$work/serve.log" &
serve_pid=$!
pids+=($serve_pid)
for _ in $(seq 100); do grep -q '^open: ' "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
open="$(sed -n 's/^open: //p' "$work/serve.out")"
[[ -n "$open" ]] || fail "host-app --serve printed no /open URL: $(cat "$work/serve.out" "$work/serve.log")"
location="$(curl -s --max-time 10 -o /dev/null -w '%{http_code} %{redirect_url}' "$open")"
[[ "$location" == "302 http://"*"/$app/pages/about.html" ]] || fail "/open answered '$location'"
curl -sf --max-time 10 -o "$work/about.html" "${location#302 }" || fail "GET ${location#302 } failed"
cmp "$work/about.html" "$fixture/pages/about.html" || fail "the served page differs from the published one"
kill -TERM "$serve_pid"
for _ in $(seq 100); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$serve_pid" 2>/dev/null || fail "host-app --serve did not stop on SIGTERM within 10 s"

step "passed in $((SECONDS - started)) s"
