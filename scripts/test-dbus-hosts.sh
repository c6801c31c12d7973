#!/usr/bin/env bash
# Runs the D-Bus host examples (examples/dbus-host-c, built with pkg-config, and
# examples/dbus-host-python) against `offline-agent serve --dbus session` on a private
# dbus-daemon: each shows mall's page, and when `offline-agent sync` (another process)
# installs 1.1.0 it reloads and confirms 1.1.0 through Confirm(version).
#
# Needs the tools built (`swift build`; scripts/test.sh runs this after the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
bin="$(swift build --show-bin-path)"
whitelist="https://h5.example.com/mall/"
fail() { echo "test-dbus-hosts: FAIL: $*" >&2; exit 1; }
step() { echo "== test-dbus-hosts: $*"; }

work="$(mktemp -d /tmp/offline-agent-dbus-hosts.XXXXXX)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

step "build examples/dbus-host-c with pkg-config"
# shellcheck disable=SC2046  # pkg-config prints several flags
cc -Wall -Wextra -Werror examples/dbus-host-c/host.c $(pkg-config --cflags --libs libsystemd) -o "$work/host-c"

for host in c python; do
    step "$host host: publish 1.0.0, sync, serve --dbus session"
    rm -rf "$work/publish" "$work/root"
    "$bin/offline-publish" keygen --out "$work/signing.key" --force >"$work/public.key"
    timeout 60 "$bin/offline-publish" publish --app mall --version 1.0.0 --source fixtures/sample-app/1.0.0 \
        --out "$work/publish" --whitelist "$whitelist" --key "$work/signing.key" >/dev/null
    "$bin/offline-server" --dir "$work/publish" --port 0 --key "$work/signing.key" >"$work/server.out" 2>"$work/server.log" &
    pids+=($!)
    for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
    address="$(sed -n 's/^listening on //p' "$work/server.out")"
    [[ -n $address ]] || fail "offline-server did not start"
    sync=("$bin/offline-agent" sync --root "$work/root" --app mall --manifest "http://$address/manifest"
          --public-key "$(cat "$work/public.key")" --force)
    timeout 60 "${sync[@]}" 2>/dev/null || fail "the first sync failed"
    dbus-daemon --session --nofork --nopidfile --print-address >"$work/bus.address" 2>/dev/null &
    pids+=($!)
    for _ in $(seq 100); do grep -q guid= "$work/bus.address" 2>/dev/null && break; sleep 0.1; done
    DBUS_SESSION_BUS_ADDRESS="$(head -1 "$work/bus.address")"
    export DBUS_SESSION_BUS_ADDRESS
    "$bin/offline-agent" serve --root "$work/root" --port 0 --dbus session >"$work/serve.out" 2>"$work/serve.log" &
    pids+=($!)
    for _ in $(seq 100); do grep -q '^dbus: ' "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^dbus: ' "$work/serve.out" || fail "serve --dbus did not own the name: $(cat "$work/serve.log")"

    step "$host host: show, then reload and confirm what a sync by the CLI installs"
    # Bounded: a host that never hears VersionInstalled fails the run, never hangs it.
    if [[ $host == c ]]; then command=(timeout -k 5 120 "$work/host-c"); else command=(timeout -k 5 120 /usr/bin/python3 examples/dbus-host-python/host.py); fi
    "${command[@]}" mall "${whitelist}index.html" >"$work/host.out" 2>"$work/host.err" &
    host_pid=$!
    for _ in $(seq 300); do grep -q '^waiting' "$work/host.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^show http://.*(version 1.0.0)$' "$work/host.out" || fail "$host host did not show 1.0.0: $(cat "$work/host.out" "$work/host.err")"
    # offline-server serves the publish directory: 1.1.0 is offered from now on.
    timeout 60 "$bin/offline-publish" publish --app mall --version 1.1.0 --source fixtures/sample-app/1.1.0 \
        --out "$work/publish" --whitelist "$whitelist" --key "$work/signing.key" >/dev/null
    timeout 60 "${sync[@]}" 2>/dev/null || fail "the sync of 1.1.0 failed"
    wait "$host_pid" || fail "$host host exited with status $?: $(cat "$work/host.out" "$work/host.err")"
    grep -q '^installed 1.1.0 (was 1.0.0)$' "$work/host.out" || fail "$host host saw no VersionInstalled: $(cat "$work/host.out")"
    grep -q '^reload http://.*(version 1.1.0)$' "$work/host.out" || fail "$host host did not reload 1.1.0: $(cat "$work/host.out")"
    grep -q '^confirmed 1.1.0$' "$work/host.out" || fail "$host host did not confirm 1.1.0"
    state=$("$bin/offline-agent" status --root "$work/root" --app mall --json | python3 -c 'import json, sys; s = json.load(sys.stdin); print(s["version"], s["state"])')
    [[ $state == "1.1.0 good" ]] || fail "after the $host host: $state"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
done
step "passed"
