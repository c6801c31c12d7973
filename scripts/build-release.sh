#!/usr/bin/env bash
# The release build, as shipped and as benchmarked: the Swift runtime and Foundation
# are linked statically, so a device needs no Swift toolchain and the process starts
# without resolving ~13 k symbols across 14 shared libraries (about 8 ms instead of
# 14 ms per run on the dev VM, which is most of what a throttled cron `sync` costs).
#
#   scripts/build-release.sh [PRODUCT...]    (default: offline-agent offline-publish offline-server)
#
# Binaries land in "$(swift build -c release --show-bin-path)".
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
(( $# )) || set -- offline-agent offline-publish offline-server
for product in "$@"; do
    swift build -c release --static-swift-stdlib --product "$product"
done
