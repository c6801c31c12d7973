#!/usr/bin/env bash
# The callgrind profile of `serve --dbus session` (docs/DBUS.md) for scripts/order-file.sh:
# on a private session bus, the D-Bus service starts, answers what a host asks while it
# idles (properties, Resolve, ResolveFile, Status, Ping) and idles through a few of its
# 2-second readings; then SIGTERM, and the profile is complete when this returns.
#
#   scripts/release/dbus-profile.sh SYMBOLS ROOT OUT
#     SYMBOLS  offline-agent with its symbol table (KEEP_SYMBOLS=1 scripts/build-release.sh)
#     ROOT     an agent root with an app installed (the demo's)
#     OUT      the callgrind profile to write
set -euo pipefail
symbols=${1:?symbols} root=${2:?root} out=${3:?out}
command -v dbus-daemon >/dev/null || { echo "error: dbus-daemon is needed (apt-get install dbus-daemon)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/dbus-profile.XXXXXX")
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
dbus-daemon --session --nofork --nopidfile --print-address > "$work/address" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do grep -q guid= "$work/address" 2>/dev/null && break; sleep 0.1; done
bus=$(head -1 "$work/address")
export DBUS_SESSION_BUS_ADDRESS=$bus
valgrind --quiet --tool=callgrind --demangle=no --callgrind-out-file="$out" \
    "$symbols" serve --root "$root" --port 0 --dbus session > "$work/serve.out" 2> "$work/serve.err" &
serve=$!
pids+=("$serve")
# Under callgrind the start takes seconds.
for _ in $(seq 600); do grep -q '^dbus: ' "$work/serve.out" 2>/dev/null && break; sleep 0.2; done
grep -q '^dbus: ' "$work/serve.out" || { cat "$work/serve.err" >&2; echo "error: serve --dbus did not start" >&2; exit 1; }
apps=("$root"/apps/*/)
app=$(basename "${apps[0]}")
path=$(busctl --address="$bus" call org.offlineagent.Agent1 /org/offlineagent/Agent1 org.offlineagent.Agent1.Manager GetApp s "$app" | sed 's/^o "\(.*\)"$/\1/')
url=$(busctl --address="$bus" get-property org.offlineagent.Agent1 "$path" org.offlineagent.Agent1.App Whitelist | sed 's/^as [0-9]* "\([^"]*\)".*$/\1/')
for _ in 1 2 3; do
    busctl --address="$bus" call org.offlineagent.Agent1 "$path" org.offlineagent.Agent1.App Resolve s "$url" >/dev/null
    busctl --address="$bus" call org.offlineagent.Agent1 "$path" org.offlineagent.Agent1.App ResolveFile s "$url" >/dev/null || true
    busctl --address="$bus" call org.offlineagent.Agent1 "$path" org.freedesktop.DBus.Peer Ping >/dev/null
    busctl --address="$bus" call org.offlineagent.Agent1 "$path" org.freedesktop.DBus.Properties GetAll s org.offlineagent.Agent1.App >/dev/null
done
busctl --address="$bus" call org.offlineagent.Agent1 "$path" org.offlineagent.Agent1.App Status >/dev/null
sleep 7
kill "$serve"
# callgrind writes the profile as the process exits: bounded wait.
for _ in $(seq 300); do kill -0 "$serve" 2>/dev/null || break; sleep 0.2; done
[[ -s $out ]] || { echo "error: no profile at $out" >&2; exit 1; }
