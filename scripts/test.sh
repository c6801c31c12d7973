#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh
# The CLI and server executables are exercised as real processes by the tests.
swift build --build-tests
swift test --skip-build "$@"
# The whole run (no arguments, as CI runs it) also proves the library works as a
# dependency: examples/host-app built by version from a tagged clone, and run.
if (($# == 0)); then
    scripts/test-host-app.sh
fi
