#!/usr/bin/env bash
# The D-Bus service of `offline-agent serve --dbus` (docs/DBUS.md) against its targets
# (issue 41), on a private session bus (dbus-daemon of its own):
#   - `Resolve` round trip, p50 <= 0.3 ms and p99 <= 2 ms: a Gio client (as a GTK host
#     calls) making N calls one after another; beside it, in the same client, the bus's own
#     round trip as the reference: org.freedesktop.DBus.Peer.Ping answered by the service's
#     sd-bus (no code of ours) and by dbus-daemon; and one-shot `busctl call`s of both
#     (a process per call: what a shell script pays);
#   - idle RSS of `serve` with --dbus minus without (VmRSS after startup, one request and
#     IDLE seconds of idling), <= 2 MB; and the CPU time each spends over those seconds;
#   - signal latency: a subscriber renames `current` to a new version and times until its
#     VersionInstalled arrives, <= 10 ms (median and worst over SWAPS swaps).
#
#   bench/dbus.sh
#
# Environment:
#   OURS=/path/to/offline-agent   binary under test (default .build/release/offline-agent)
#   BUILD=auto|1|0                build release first (auto: only when OURS is the default)
#   CALLS=2000                    Resolve and Ping calls measured (after 200 warm-up calls)
#   ONESHOTS=50                   busctl runs per member
#   SWAPS=20                      version swaps timed
#   IDLE=10                       seconds each serve idles before its RSS and CPU are read
#   KEEP=1                        keep the scratch directory
#
# Needs dbus-daemon, busctl and /usr/bin/python3 with gi (python3-gi). Prints key=value
# lines, then PASS/FAIL lines; exits 1 when a target is missed.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT_OURS="$ROOT/.build/release/offline-agent"
OURS=${OURS:-$DEFAULT_OURS}
BUILD=${BUILD:-auto}
CALLS=${CALLS:-2000}
ONESHOTS=${ONESHOTS:-50}
SWAPS=${SWAPS:-20}
IDLE=${IDLE:-10}
PYTHON=/usr/bin/python3

die() { printf 'dbus.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }
for tool in dbus-daemon busctl; do command -v "$tool" >/dev/null || die "missing $tool (apt-get install dbus-daemon systemd)"; done
"$PYTHON" -c 'import gi; gi.require_version("Gio", "2.0")' 2>/dev/null || die "$PYTHON has no gi (apt-get install python3-gi)"

if [ "$BUILD" = 1 ] || { [ "$BUILD" = auto ] && [ "$OURS" = "$DEFAULT_OURS" ]; }; then
    log "building release (scripts/build-release.sh offline-agent)"
    "$ROOT/scripts/build-release.sh" offline-agent >&2
fi
[ -x "$OURS" ] || die "no binary at $OURS"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-dbus.XXXXXX")
PIDS=()
# The bus and the servers this script started (by their ids), then the scratch directory.
finish() {
    ((${#PIDS[@]})) && { kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; }
    [ "${KEEP:-0}" = 1 ] && log "kept $WORK" || rm -rf "$WORK"
}
trap finish EXIT

# --- an agent root: mall 1.0.0 active (the swaps below add each next version and remove
# the one before the previous, so the app keeps two versions, as a device's does) ------
WHITELIST=https://h5.example.com/mall/
AGENT="$WORK/agent"
mkdir -p "$AGENT/apps/mall/versions" "$AGENT/apps/mall/packages" "$AGENT/apps/mall/downloads"
version_json() {
    printf '{"installedAt": "2024-01-01T00:00:00Z", "miniVersion": "1.0.0", "packageSha256": "%064d", "rollout": 100, "version": "%s", "via": "full", "whitelist": ["%s"]}\n' 0 "$1" "$WHITELIST"
}
cp -R "$ROOT/fixtures/sample-app/1.0.0" "$AGENT/apps/mall/versions/1.0.0"
version_json 1.0.0 > "$AGENT/apps/mall/versions/1.0.0.json"
ln -s versions/1.0.0 "$AGENT/apps/mall/current"
echo bench-device > "$AGENT/device-id"

# --- the bus --------------------------------------------------------------------------
dbus-daemon --session --nofork --nopidfile --print-address > "$WORK/bus.address" 2> "$WORK/bus.err" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q 'guid=' "$WORK/bus.address" 2>/dev/null && break; sleep 0.1; done
BUS=$(head -1 "$WORK/bus.address")
[[ $BUS == unix:* ]] || die "dbus-daemon did not start: $(cat "$WORK/bus.err")"
export DBUS_SESSION_BUS_ADDRESS=$BUS

# serve_idle NAME ARGS...: starts serve, waits for its lines, makes one request, idles
# IDLE s; sets SERVE_PID, SERVE_PORT, RSS_KB (and its RssAnon and RssFile parts) and
# CPU_TICKS (user+system over the idle time); leaves the Rss of each mapped file in $WORK/NAME.maps.
serve_idle() {
    local name=$1 want=1
    shift
    [[ " $* " == *" --dbus "* ]] && want=2
    : > "$WORK/$name.out"
    "$OURS" serve --root "$AGENT" --port 0 --device-id bench-device "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    for _ in $(seq 1 100); do [ "$(wc -l < "$WORK/$name.out")" -ge "$want" ] && break; sleep 0.1; done
    SERVE_PORT=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$WORK/$name.out")
    [ -n "$SERVE_PORT" ] && [ "$(wc -l < "$WORK/$name.out")" -ge "$want" ] || die "serve $* did not start: $(cat "$WORK/$name.err")"
    curl -sf -o /dev/null -H "Host: mall.h5.example.com" "http://127.0.0.1:$SERVE_PORT/" || true
    local before after
    before=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
    sleep "$IDLE"
    after=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
    CPU_TICKS=$((after - before))
    RSS_KB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SERVE_PID/status")
    RSS_ANON_KB=$(awk '/^RssAnon:/ { print $2 }' "/proc/$SERVE_PID/status")
    RSS_FILE_KB=$(awk '/^RssFile:/ { print $2 }' "/proc/$SERVE_PID/status")
    awk '/^[0-9a-f]+-[0-9a-f]+ / { name = $6 } /^Rss:/ && name ~ /^\// { rss[name] += $2 } END { for (n in rss) print n, rss[n] }' \
        "/proc/$SERVE_PID/smaps" | sort > "$WORK/$name.maps"
}
stop_serve() { kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; }
TICK=$(getconf CLK_TCK)

log "serve without --dbus: idle RSS and CPU over ${IDLE}s"
serve_idle plain
PLAIN_RSS_KB=$RSS_KB PLAIN_CPU=$CPU_TICKS PLAIN_ANON_KB=$RSS_ANON_KB PLAIN_FILE_KB=$RSS_FILE_KB
stop_serve

log "serve --dbus session: idle RSS and CPU over ${IDLE}s"
serve_idle dbus --dbus session
DBUS_RSS_KB=$RSS_KB DBUS_CPU=$CPU_TICKS DBUS_ANON_KB=$RSS_ANON_KB DBUS_FILE_KB=$RSS_FILE_KB

# --- round trips and signal latency, from one Gio client -----------------------------
log "Resolve and Ping round trips ($CALLS each), $SWAPS swaps"
"$PYTHON" - "$CALLS" "$SWAPS" "$AGENT" "$WHITELIST" "$ROOT/fixtures/sample-app/1.0.0" "$(version_json VERSION)" > "$WORK/client.out" <<'PY'
import os, shutil, sys, time
import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib

calls, swaps, agent, whitelist, fixture, version_json = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
NAME, APP, MANAGER = "org.offlineagent.Agent1", "/org/offlineagent/Agent1/app/mall", "/org/offlineagent/Agent1"
bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)

def timed(dest, path, interface, member, args):
    times = []
    for i in range(200 + calls):
        start = time.perf_counter_ns()
        bus.call_sync(dest, path, interface, member, args, None, Gio.DBusCallFlags.NONE, 5000, None)
        if i >= 200:
            times.append(time.perf_counter_ns() - start)
    times.sort()
    return times[len(times) // 2] / 1e6, times[min(len(times) - 1, (len(times) * 99) // 100)] / 1e6

url = GLib.Variant("(s)", (whitelist + "index.html",))
for key, target in (("resolve", (NAME, APP, NAME + ".App", "Resolve", url)),
                    ("ping_service", (NAME, APP, "org.freedesktop.DBus.Peer", "Ping", None)),
                    ("ping_daemon", ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.Peer", "Ping", None))):
    p50, p99 = timed(*target)
    print(f"{key}.p50_ms={p50:.3f}")
    print(f"{key}.p99_ms={p99:.3f}")

# Signal latency: rename `current` to the next version; time until VersionInstalled names it.
loop = GLib.MainLoop()
state = {"want": None, "sent": 0, "latencies": []}
def on_signal(_c, _s, _p, _i, member, parameters):
    if member == "VersionInstalled" and parameters.unpack()[1] == state["want"]:
        state["latencies"].append((time.perf_counter_ns() - state["sent"]) / 1e6)
        loop.quit()
bus.signal_subscribe(NAME, NAME + ".Manager", "VersionInstalled", MANAGER, None, Gio.DBusSignalFlags.NONE, on_signal)
bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId", None, None, Gio.DBusCallFlags.NONE, 5000, None)
app = os.path.join(agent, "apps", "mall")
versions = os.path.join(app, "versions")
for i in range(1, swaps + 1):
    # The next version, as a sync extracts it; the one before the previous goes.
    shutil.copytree(fixture, os.path.join(versions, f"1.0.{i}"))
    with open(os.path.join(versions, f"1.0.{i}.json"), "w") as file:
        file.write(version_json.replace("VERSION", f"1.0.{i}"))
    if i >= 2:
        shutil.rmtree(os.path.join(versions, f"1.0.{i - 2}"))
        os.unlink(os.path.join(versions, f"1.0.{i - 2}.json"))
    time.sleep(0.5)  # the service has read those changes; it idles, as a device's does
    state["want"] = f"1.0.{i}"
    os.symlink(f"versions/1.0.{i}", os.path.join(app, "current.bench"))
    state["sent"] = time.perf_counter_ns()
    os.rename(os.path.join(app, "current.bench"), os.path.join(app, "current"))
    timeout = GLib.timeout_add(5000, loop.quit)
    loop.run()
    GLib.source_remove(timeout)
lat = sorted(state["latencies"])
print(f"signal.received={len(lat)}")
if lat:
    print(f"signal.p50_ms={lat[len(lat) // 2]:.3f}")
    print(f"signal.max_ms={lat[-1]:.3f}")
PY
cat "$WORK/client.out"

log "busctl one-shots ($ONESHOTS each)"
oneshot() {
    local start end times=()
    for _ in $(seq 1 "$ONESHOTS"); do
        start=$(date +%s%N)
        busctl --user --address="$BUS" call "$@" >/dev/null
        end=$(date +%s%N)
        times+=($(( (end - start) / 1000 )))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "%.3f", a[int((NR + 1) / 2)] / 1000 }'
}
echo "busctl_resolve.median_ms=$(oneshot org.offlineagent.Agent1 /org/offlineagent/Agent1/app/mall org.offlineagent.Agent1.App Resolve s "${WHITELIST}index.html")"
echo "busctl_ping.median_ms=$(oneshot org.offlineagent.Agent1 /org/offlineagent/Agent1/app/mall org.freedesktop.DBus.Peer Ping)"
stop_serve

awk -v a="$PLAIN_RSS_KB" -v b="$DBUS_RSS_KB" 'BEGIN { printf "rss.plain_mb=%.1f\nrss.dbus_mb=%.1f\nrss.added_mb=%.2f\n", a / 1024, b / 1024, (b - a) / 1024 }'
# Where the added RSS is: anonymous memory (heap, the bus thread's stack), and file pages:
# those of the libraries only --dbus maps (libsystemd and what it links, shared with every
# other process that maps them) and the rest (our binary's code that the service runs).
BUS_LIBS_KB=$(join -v 2 "$WORK/plain.maps" "$WORK/dbus.maps" | awk '{ s += $2 } END { print s + 0 }')
awk -v pa="$PLAIN_ANON_KB" -v da="$DBUS_ANON_KB" -v pf="$PLAIN_FILE_KB" -v df="$DBUS_FILE_KB" -v l="$BUS_LIBS_KB" \
    'BEGIN { printf "rss.added_anon_mb=%.2f\nrss.added_file_mb=%.2f\nrss.bus_libraries_mb=%.2f\n", (da - pa) / 1024, (df - pf) / 1024, l / 1024 }'
join -v 2 "$WORK/plain.maps" "$WORK/dbus.maps" | sort -k2 -rn | awk '{ printf "# mapped by --dbus only: %s %d kB\n", $1, $2 }'
join "$WORK/plain.maps" "$WORK/dbus.maps" | awk '$3 - $2 >= 64 { printf "# grown with --dbus: %s +%d kB\n", $1, $3 - $2 }'
awk -v a="$PLAIN_CPU" -v b="$DBUS_CPU" -v t="$TICK" -v s="$IDLE" 'BEGIN { printf "idle_cpu.plain_ms_per_s=%.2f\nidle_cpu.dbus_ms_per_s=%.2f\n", a * 1000 / t / s, b * 1000 / t / s }'

# --- targets ------------------------------------------------------------------------
STATUS=0
value() { sed -n "s/^$1=//p" "$WORK/client.out"; }
check() {  # check NAME VALUE TARGET (VALUE <= TARGET passes)
    if awk -v v="$2" -v t="$3" 'BEGIN { exit !(v != "" && v <= t) }'; then echo "# PASS $1 = $2 (target <= $3)"; else echo "# FAIL $1 = $2 (target <= $3)"; STATUS=1; fi
}
check "Resolve p50 ms" "$(value resolve.p50_ms)" 0.3
check "Resolve p99 ms" "$(value resolve.p99_ms)" 2
check "idle RSS added by --dbus MB" "$(awk -v a="$PLAIN_RSS_KB" -v b="$DBUS_RSS_KB" 'BEGIN { printf "%.2f", (b - a) / 1024 }')" 2
[ "$(value signal.received)" = "$SWAPS" ] || { echo "# FAIL signals received: $(value signal.received) of $SWAPS"; STATUS=1; }
check "VersionInstalled after the swap, max ms" "$(value signal.max_ms)" 10
exit $STATUS
