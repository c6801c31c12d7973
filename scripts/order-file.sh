#!/usr/bin/env bash
# Regenerates scripts/release/offline-agent.order, the function order the release link of
# offline-agent follows (scripts/build-release.sh).
#
# Why: a process maps its code in large pieces (the kernel's fault-around and page-cache
# folios), so the resident size and the page faults of a run follow how scattered the
# functions it executes are, not how many. Left in the compiler's order, the 1.5 MB that
# `serve` runs were spread over 16 MB of the 22 MB of code. Listed first, in this order:
#   1. what both a throttled no-op `sync` (cron and systemd start it every few minutes) and
#      `serve` (it stays resident next to the web views) run,
#   2. what only the throttled `sync` runs, then what only `serve` runs,
#   3. what only `serve --dbus` adds (the D-Bus service idling and answering reads, on a
#      private session bus; docs/DBUS.md): packed, it costs the idle serve less resident code,
#   4. what the rest of scripts/demo.sh runs (full and patch installs, status, resolve,
#      session-url, cookies), most shared first.
#
# How: scripts/demo.sh runs with every offline-agent call under valgrind's callgrind
# (OFFLINE_AGENT=wrapper), then one more throttled `sync`; the functions each run executed
# are read from callgrind's profiles. Symbols only, so the list is a plain text file:
# review it like a lock file. Functions that have since been renamed or removed are ignored
# by the linker (a stale list costs locality, never correctness); run this again after large
# changes and compare `bench/run.sh footprint`.
#
#   scripts/order-file.sh          (needs valgrind; builds the release first)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
command -v valgrind >/dev/null || { echo "error: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
KEEP_SYMBOLS=1 scripts/build-release.sh offline-agent
# shellcheck disable=SC2086  # SWIFT_BUILD_FLAGS is a list of flags
symbols="$(swift build -c release ${SWIFT_BUILD_FLAGS:-} --show-bin-path)/offline-agent.symbols"
[[ -f $symbols ]] || { echo "error: $symbols was not written" >&2; exit 1; }

work=$(mktemp -d /tmp/offline-agent-order.XXXXXX)
trap 'rm -rf "$work"' EXIT
profiles="$work/profiles"
mkdir -p "$profiles"
# One profile per process, named after its subcommand; callgrind writes it when the
# process exits, also when the demo stops `serve` with SIGTERM.
cat > "$work/offline-agent" <<WRAPPER
#!/bin/sh
exec valgrind --quiet --tool=callgrind --demangle=no \
    --callgrind-out-file="$profiles/\${1:-none}.%p" "$symbols" "\$@"
WRAPPER
chmod +x "$work/offline-agent"

OFFLINE_AGENT="$work/offline-agent" DEMO_DIR="$work/demo" scripts/demo.sh >"$work/demo.log" 2>&1 ||
    { cat "$work/demo.log" >&2; echo "error: the demo failed under callgrind" >&2; exit 1; }
# The demo's last sync was forced moments ago, so this one is throttled: the cron path.
manifest=$(sed -n 's/^   serving .* at //p' "$work/demo.log")/manifest
valgrind --quiet --tool=callgrind --demangle=no --callgrind-out-file="$profiles/noop" \
    "$symbols" sync --root "$work/demo/root" --app mall --manifest "$manifest" --allow-unsigned >/dev/null
# serve exits on the demo's SIGTERM; wait (bounded) until its profile is complete.
for _ in $(seq 100); do pgrep -f "callgrind-out-file=$profiles" >/dev/null || break; sleep 0.2; done
scripts/release/dbus-profile.sh "$symbols" "$work/demo/root" "$profiles/dbus"

mkdir -p scripts/release
python3 - "$symbols" "$profiles" scripts/release/offline-agent.order <<'PY'
import collections, os, re, sys
binary, profiles, out = sys.argv[1:4]

def executed(path):
    """Functions of `binary` that one callgrind profile saw run."""
    names, objects, functions, current = set(), {}, {}, None
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                objects[m.group(2)] = m.group(3)
            if m.group(1) == "ob":
                current = objects.get(m.group(2))
            continue
        # A name is given once, on the first fn= or cfn= line that uses its id.
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                functions[m.group(2)] = m.group(3).split("'")[0]  # 'N marks a recursion depth
            if m.group(1) == "fn" and current == binary:
                names.add(functions[m.group(2)])
    return names

runs = {name: executed(os.path.join(profiles, name)) for name in sorted(os.listdir(profiles))}
noop = runs.pop("noop")
dbus = runs.pop("dbus", set())
serve = set().union(*(fns for name, fns in runs.items() if name.startswith("serve.")))
uses = collections.Counter(f for fns in runs.values() for f in fns)
order, seen = [], set()
# What both run first, so each of the two finds all it runs in one stretch.
for group in (sorted(noop & serve), sorted(noop - serve), sorted(serve - noop), sorted(dbus - serve - noop),
              sorted(uses, key=lambda f: (-uses[f], f))):
    for f in group:
        if f not in seen and not f.startswith("0x"):
            seen.add(f)
            order.append(f)
with open(out, "w") as f:
    f.write("\n".join(order) + "\n")
print(f"{out}: {len(order)} functions: {len(noop)} run by a throttled sync, "
      f"{len(serve - noop)} more by serve, {len(dbus - serve - noop)} more by serve --dbus, "
      f"{len(order) - len(serve | noop | dbus)} more by the rest of the demo")
PY
