#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test, then the
# Debian packages' (scripts/test-deb.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh
# The CLI and server executables are exercised as real processes by the tests.
swift build --build-tests
swift test --skip-build "$@"
# The Debian packages (release build, lintian, install, purge) when every test runs;
# OFFLINE_AGENT_DEB_TESTS=0 skips them.
if (($# == 0)) && [[ ${OFFLINE_AGENT_DEB_TESTS:-1} == 1 ]]; then
    scripts/test-deb.sh
fi
