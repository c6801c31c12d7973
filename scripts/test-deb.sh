#!/usr/bin/env bash
# The Debian packages, end to end: build them (scripts/package-deb.sh; by default from
# the debug objects the Swift tests were built from, linked statically as a release is),
# lintian (no error, no warning), install both into a throw-away root with
# `dpkg --root`, run the installed tools, `systemd-analyze verify` the installed units,
# enable them as an operator would, reinstall over an edited conffile, remove, purge,
# and check the root is exactly as before. Never touches the machine's own packages.
#
#   scripts/test-deb.sh [--bin-dir DIR]   (--bin-dir: package those binaries, no build)
#   DEB_TEST_CONFIGURATION=release        package the release build instead (scripts/build-release.sh
#                                         of every product: ~13 minutes more on 2 cores)
#
# What is checked does not depend on the configuration: the packaging (files, units,
# conffiles, Depends: from the binaries' NEEDED, maintainer scripts, lintian) is the same
# script either way, and the installed binaries run. The release compile itself is
# covered by scripts/build-release.sh (bench/run.sh, the shipped package).
#
# Run by scripts/test.sh after the Swift tests. Needs dpkg-deb, lintian, systemd-analyze.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
started=$SECONDS
step() { echo "== test-deb: [$((SECONDS - started)) s] $*"; }
for tool in dpkg dpkg-deb lintian systemd-analyze systemctl; do
    command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/test-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
version=$(sed -n 's/^ *public static let current = "\([^"]*\)".*/\1/p' Sources/OfflineAgent/Agent/AgentVersion.swift)
[[ -n $version ]] || fail "no AgentVersion.current in Sources/OfflineAgent/Agent/AgentVersion.swift"
arch=$(dpkg --print-architecture)

step "build the packages"
# gzip -1: xz of the large debug binaries would take most of this test's time.
DEB_COMPRESSION=${DEB_COMPRESSION:-gzip} DEB_COMPRESSION_LEVEL=${DEB_COMPRESSION_LEVEL:-1} \
    timeout 3600 scripts/package-deb.sh --out "$work/debs" --configuration "${DEB_TEST_CONFIGURATION:-debug}" "$@" ||
    fail "scripts/package-deb.sh failed"
agent_deb="$work/debs/offline-agent_${version}_${arch}.deb"
publish_deb="$work/debs/offline-publish_${version}_${arch}.deb"
for deb in "$agent_deb" "$publish_deb"; do
    [[ -f $deb ]] || fail "no $deb"
    [[ $(dpkg-deb -f "$deb" Version) == "$version" ]] || fail "$deb: Version is not $version"
done

step "lintian"
# Errors and warnings fail, and are shown; a green run prints nothing more (no
# informational I: tags: they never fail a run, and a person has nothing to do).
if ! timeout 900 lintian --fail-on error,warning "$agent_deb" "$publish_deb" >"$work/lintian.log" 2>&1; then
    cat "$work/lintian.log" >&2
    fail "lintian reports errors or warnings (above)"
fi

# A root with what a device's root has for this: systemd's own units (for
# systemd-analyze), /var/lib and /var/log, and in its package database the machine's
# entries for the packages named in Depends: (so dpkg checks them, versions included,
# against real packages). Maintainer scripts run outside a chroot, with DPKG_ROOT set:
# they must honour it.
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers" \
    "$root/var/lib/private" "$root/var/log" "$root/usr/lib/systemd/system" "$root/etc/systemd/system"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
for package in $(for deb in "$agent_deb" "$publish_deb"; do dpkg-deb -f "$deb" Depends; done |
    tr ',|' '\n\n' | awk 'NF { print $1 }' | sort -u); do
    dpkg-query -W -f '${db:Status-Status}' "$package" 2>/dev/null | grep -qx installed ||
        fail "Depends: names $package, which is not installed on this machine"
    dpkg-query -W -f 'Package: ${Package}\nStatus: ${Status}\nPriority: optional\nVersion: ${Version}\nArchitecture: ${Architecture}\nMulti-Arch: ${Multi-Arch}\nMaintainer: ${Maintainer}\nDescription: ${binary:Summary}\n\n' \
        "$package" | sed '/^Multi-Arch: $/d' >>"$root/var/lib/dpkg/status"
    touch "$root/var/lib/dpkg/info/$(dpkg-query -W -f '${binary:Package}' "$package").list"
done
cp -a /usr/lib/systemd/system/. "$root/usr/lib/systemd/system/"
rootdpkg() { timeout 300 dpkg --root="$root" --force-script-chrootless --log=/dev/null "$@" </dev/null; }
snapshot() { (cd "$root" && find . -path ./var/lib/dpkg -prune -o -printf '%p %y %m %l\n' | LC_ALL=C sort); }
snapshot >"$work/before"
status_of() { dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${db:Status-Status}' "$1" 2>/dev/null || echo not-installed; }

step "install into $root"
rootdpkg -i "$agent_deb" "$publish_deb" || fail "dpkg -i into the throw-away root failed"
for package in offline-agent offline-publish; do
    [[ $(status_of $package) == installed ]] || fail "$package is $(status_of $package), not installed"
done
for file in /usr/bin/offline-agent /usr/bin/offline-publish /usr/bin/offline-server \
    /usr/lib/systemd/system/offline-agent-sync.service /usr/lib/systemd/system/offline-agent-sync.timer \
    /usr/lib/systemd/system/offline-agent-serve.service /etc/offline-agent/agent.json \
    /etc/logrotate.d/offline-agent /usr/share/doc/offline-agent/copyright /usr/share/man/man1/offline-agent.1.gz \
    /usr/share/doc/offline-publish/copyright /usr/share/man/man1/offline-server.1.gz \
    /usr/share/dbus-1/system.d/org.offlineagent.Agent1.conf /usr/share/dbus-1/system-services/org.offlineagent.Agent1.service \
    /usr/share/dbus-1/interfaces/org.offlineagent.Agent1.xml /usr/lib/sysusers.d/offline-agent.conf; do
    [[ -e $root$file ]] || fail "$file is not installed"
done
# The D-Bus files parse: the policy as a bus configuration (a private dbus-daemon includes
# it and checks it), the interfaces as XML, the activation file names the name and the unit,
# the sysusers file as systemd-sysusers reads it.
python3 -c 'import sys, xml.etree.ElementTree as E; [E.parse(f) for f in sys.argv[1:]]' \
    "$root/usr/share/dbus-1/system.d/org.offlineagent.Agent1.conf" "$root/usr/share/dbus-1/interfaces/org.offlineagent.Agent1.xml" ||
    fail "the D-Bus policy or the interfaces are not well-formed XML"
cat >"$work/bus.conf" <<BUS
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path=$work/bus.socket</listen>
<include>$root/usr/share/dbus-1/system.d/org.offlineagent.Agent1.conf</include></busconfig>
BUS
# (Its warnings about the user and group, which postinst creates, go to stderr; the
# address on stdout says it accepted the file.)
bus_check=$(timeout -k 2 10 dbus-daemon --config-file="$work/bus.conf" --nofork --nopidfile --print-address 2>"$work/bus.err" | head -1) || true
[[ $bus_check == unix:* ]] || fail "dbus-daemon refuses the shipped policy: $(cat "$work/bus.err")"
grep -qx 'Name=org.offlineagent.Agent1' "$root/usr/share/dbus-1/system-services/org.offlineagent.Agent1.service" &&
    grep -qx 'SystemdService=offline-agent-serve.service' "$root/usr/share/dbus-1/system-services/org.offlineagent.Agent1.service" ||
    fail "the D-Bus activation file does not name org.offlineagent.Agent1 and offline-agent-serve.service"
timeout 20 systemd-sysusers --root="$root" --dry-run "$root/usr/lib/sysusers.d/offline-agent.conf" >/dev/null 2>&1 ||
    fail "systemd-sysusers cannot read the shipped sysusers file"
[[ $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Conffiles}' offline-agent | awk '{print $1}' | sort | paste -sd' ') == \
    "/etc/logrotate.d/offline-agent /etc/offline-agent/agent.json" ]] || fail "the conffiles are not exactly agent.json and the logrotate file"

step "run the installed tools"
for tool in offline-agent offline-publish; do
    installed=$(timeout 60 "$root/usr/bin/$tool" --version) || fail "the installed $tool --version failed"
    [[ $installed == "$version" ]] || fail "the installed $tool says $installed, AgentVersion.current is $version"
done
# The stripped binaries do real work: a key pair, and the installed example config with it.
public_key=$(timeout 60 "$root/usr/bin/offline-publish" keygen --out "$work/signing.key") || fail "the installed offline-publish keygen failed"
sed "s#REPLACE-WITH-THE-BASE64-PUBLIC-KEY-FROM-offline-publish-keygen#$public_key#" \
    "$root/etc/offline-agent/agent.json" >"$work/agent.json"
timeout 60 "$root/usr/bin/offline-agent" check-config "$work/agent.json" >/dev/null ||
    fail "the installed offline-agent check-config rejects the installed example config (with a real key)"
timeout 60 "$root/usr/bin/offline-server" --help >/dev/null || fail "the installed offline-server --help failed"

step "systemd-analyze verify the installed units"
for unit in offline-agent-sync.service offline-agent-sync.timer offline-agent-serve.service; do
    # Any message is a finding (an unknown key is only a warning to systemd).
    report=$(timeout 120 systemd-analyze verify --root="$root" "$unit" 2>&1) || fail "systemd-analyze verify $unit: $report"
    [[ -z $report ]] || fail "systemd-analyze verify $unit: $report"
done
grep -q '^ExecStart=/usr/bin/offline-agent sync --config /etc/offline-agent/agent.json$' \
    "$root/usr/lib/systemd/system/offline-agent-sync.service" || fail "the sync unit does not run the installed binary on the installed config"

step "enable the timer and serve as an operator would, use, edit the conffile, reinstall"
timeout 60 systemctl --root="$root" --quiet enable offline-agent-sync.timer offline-agent-serve.service ||
    fail "systemctl --root enable failed"
[[ -L $root/etc/systemd/system/timers.target.wants/offline-agent-sync.timer ]] || fail "enable made no timers.target link"
# What the units and the cron line leave behind: DynamicUser= state and the log.
mkdir -p "$root/var/lib/private/offline-agent/apps/mall"
ln -s private/offline-agent "$root/var/lib/offline-agent"
touch "$root/var/lib/private/offline-agent/apps/mall/current" "$root/var/log/offline-agent.log" "$root/var/log/offline-agent.log.1.gz"
echo '{"edited": true}' >"$root/etc/offline-agent/agent.json"
rootdpkg -i "$agent_deb" || fail "reinstalling over the edited conffile failed"
[[ $(cat "$root/etc/offline-agent/agent.json") == '{"edited": true}' ]] || fail "a reinstall replaced the edited conffile"
[[ -L $root/etc/systemd/system/timers.target.wants/offline-agent-sync.timer ]] || fail "a reinstall disabled the timer"

step "remove (the edited conffile stays), then purge (dpkg warns that this root's own systemd units keep directories)"
rootdpkg -r offline-agent offline-publish || fail "dpkg -r failed"
[[ $(status_of offline-agent) == config-files ]] || fail "after remove, offline-agent is $(status_of offline-agent), not config-files"
[[ $(status_of offline-publish) == not-installed ]] || fail "after remove, offline-publish is $(status_of offline-publish)"
[[ ! -e $root/usr/bin/offline-agent && ! -e $root/usr/lib/systemd/system/offline-agent-sync.timer ]] || fail "remove left the binary or a unit"
[[ $(cat "$root/etc/offline-agent/agent.json") == '{"edited": true}' ]] || fail "remove did not keep the edited conffile"
rootdpkg -P offline-agent || fail "dpkg -P failed"
[[ $(status_of offline-agent) == not-installed ]] || fail "after purge, offline-agent is $(status_of offline-agent)"
snapshot >"$work/after"
diff -u "$work/before" "$work/after" || fail "purge left the root different from before the install (above)"
echo "== test-deb: [$((SECONDS - started)) s] ok: lintian clean, installed, verified, reinstalled, removed and purged without a trace"
