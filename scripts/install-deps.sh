#!/usr/bin/env bash
# Installs the system packages offline-agent builds and tests with (Debian 12).
# Cheap when everything is already there: apt runs only for missing packages.
set -euo pipefail

packages=(
    libzip-dev libbz2-dev zlib1g-dev libdivsufsort-dev pkg-config   # build
    libstdc++-12-dev                                                 # build-release.sh: the Swift runtime's libstdc++, linked statically
    libsqlite3-dev                                                   # build: offline-server's fleet reports (GRDB)
    bsdiff zip unzip gzip util-linux curl                            # tests and demo: reference bsdiff/bspatch, Info-ZIP, fallocate, curl
    publicsuffix                                                     # cookies: the Public Suffix List (read at run time when present)
    systemd                                                          # tests: systemd-analyze rates and verifies the example units
    nginx-light                                                      # tests: a real static origin and caching proxy (StaticCDNTests)
    prometheus                                                       # tests: a real Prometheus scrapes offline-server (FleetReportPrometheusTests)
    postgresql                                                       # tests: offline-server's shared report store (scripts/postgres-test.sh starts it)
    python3-venv                                                     # tests: scripts/tuf-venv.sh, python-tuf for the TUF interop tests
    wrk                                                              # bench/run.sh report, manifest, proxy; bench/serve.sh: the HTTP load generator
    libarchive-tools 7zip                                            # bench/run.sh engine: bsdtar and 7zz, the reference extractors
    binutils lintian                                                 # build-release.sh, package-deb.sh: nm, strings, strip, objdump; test-deb.sh: lintian
    libsystemd-dev dbus dbus-daemon                                  # build: sd-bus headers (serve --dbus); tests: a private dbus-daemon, busctl
    python3-gi gir1.2-webkit2-4.1 xvfb libglib2.0-bin                # tests: D-Bus hosts in Python (Gio, WebKitGTK under xvfb-run), gdbus
)
if [[ "${OFFLINE_AGENT_BROWSER_TESTS:-1}" == 1 ]]; then
    packages+=(chromium)                                             # tests: real browser
fi

missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v swift >/dev/null; then
    if [[ -x /opt/swift/usr/bin/swift ]]; then
        echo "note: add /opt/swift/usr/bin to PATH" >&2
    else
        echo "error: a Swift 6 toolchain is required (https://www.swift.org/install/linux/)" >&2
        exit 1
    fi
fi
