#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test; the whole run
# (no arguments, as CI runs it) then builds examples/host-app by version and the
# Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh
# PostgreSQL for offline-server's shared report store: started (idempotently) unless a
# server is named already; when it cannot start, the PostgreSQL tests skip and say why.
if [[ -z ${OFFLINE_AGENT_TEST_POSTGRES_URL:-} ]]; then
    OFFLINE_AGENT_TEST_POSTGRES_URL="$(scripts/postgres-test.sh)" || OFFLINE_AGENT_TEST_POSTGRES_URL=""
    export OFFLINE_AGENT_TEST_POSTGRES_URL
fi
# The engine's layering (Store/ names no Install/ type): a grep, before the build.
scripts/check-layers.sh
# No test waits on the cooperative pool (two threads on CI's two cores): a grep.
scripts/check-test-waits.sh
# The CLI and server executables are exercised as real processes by the tests.
swift build --build-tests
# Every test is Swift Testing: the XCTest pass would only print "Executed 0 tests".
swift test --skip-build --disable-xctest "$@"
if (($# == 0)); then
    # The library works as a dependency: examples/host-app built by version from a
    # tagged clone, and run against the fixture.
    scripts/test-host-app.sh
    # Host apps in C and Python over D-Bus (examples/dbus-host-*) against serve --dbus.
    scripts/test-dbus-hosts.sh
    # The Debian packages (release build, lintian, install, purge);
    # OFFLINE_AGENT_DEB_TESTS=0 skips them.
    if [[ ${OFFLINE_AGENT_DEB_TESTS:-1} == 1 ]]; then
        scripts/test-deb.sh
    fi
fi
