#!/usr/bin/env bash
# The release build, as shipped and as benchmarked: the Swift runtime is linked
# statically (`--static-swift-stdlib`), so a device needs no Swift toolchain and the
# process starts without resolving symbols across a dozen shared libraries; the binaries
# are stripped. The device targets use FoundationEssentials only, so the device binary
# carries no ICU (its ~30 MB of data tables were most of the old 84 MB).
#
#   scripts/build-release.sh [--configuration debug] [PRODUCT...]
#                                            (default: release; offline-agent offline-publish offline-server)
#   SWIFT_BUILD_FLAGS="..."                  extra `swift build` flags (e.g. --ignore-lock)
#   KEEP_SYMBOLS=1                           also keep PRODUCT.symbols next to each binary: the
#                                            same binary with its symbol table (no DWARF), for
#                                            perf, valgrind and scripts/order-file.sh
#
# --configuration debug links the debug objects `swift build --build-tests` already made
# the same way (a relink, not a second compile): what scripts/test-deb.sh packages in CI.
#
# Binaries land in "$(swift build -c CONFIGURATION --show-bin-path)", stripped; the build then
# checks offline-agent (when built) for ICU and prints its size:
#   - no `icudt*` data symbol and no ICU C API symbol (`u_*`, `ucol_*`, `ubrk_*`, ... with
#     ICU's version suffix) in `nm` of the unstripped binary,
#   - no `icudt` string in the stripped binary (`strings`),
#   - no libFoundation.so / lib_FoundationICU.so in `ldd`.
# A failed check exits 1: the device binary must never grow ICU back through a dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
configuration=release
if [[ ${1:-} == --configuration ]]; then
    configuration=${2:?--configuration needs release or debug}
    shift 2
fi
[[ $configuration == release || $configuration == debug ]] ||
    { echo "error: --configuration is release or debug, not '$configuration'" >&2; exit 64; }
(( $# )) || set -- offline-agent offline-publish offline-server
# shellcheck disable=SC2086  # SWIFT_BUILD_FLAGS is a list of flags
bin=$(swift build -c "$configuration" ${SWIFT_BUILD_FLAGS:-} --show-bin-path)
link_flags=()
compile_flags=()
if [[ $configuration == release ]]; then
    # Each function and datum in a section of its own, so the linker can drop what nothing
    # references (--gc-sections) and lay out the rest in the order scripts/release/offline-agent.order
    # lists: what a throttled `sync` and `serve` run, packed together at the front of the
    # code (scripts/order-file.sh says why and regenerates it). A function missing from the
    # list keeps its place; a listed one that no longer exists is ignored.
    compile_flags=(-Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xcc -fdata-sections)
    # Whole-program optimisation at the link (full LTO): the linker sees every module at
    # once, so what no path of this program reaches (most of a dependency's API) goes, and
    # the Swift runtime records of types nothing uses are made conditional on them
    # (-conditional-runtime-records, -internalize-at-link) so they can go too: the device
    # binary 25.6 -> 23.0 MB. The link takes about 3 minutes per product on 2 cores.
    # Frame pointers everywhere: already SwiftPM's default here, named because the release
    # binary's stack walks depend on them (no unwind tables, below).
    compile_flags+=(--no-omit-frame-pointers --experimental-lto-mode=full
        -Xswiftc -Xfrontend -Xswiftc -conditional-runtime-records -Xswiftc -Xfrontend -Xswiftc -internalize-at-link)
    # What a device loads and pages in at every cron run (bench/run.sh footprint measures it):
    #  - lld, identical code folding and packed relative relocations (DT_RELR): smaller tables;
    #  - no exported dynamic symbols: Swift's static runtime flags ask for --export-dynamic,
    #    which kept every symbol of every linked object (gc roots) and 3.6 MB of symbol tables;
    #  - a position-dependent executable: nothing left for the loader to relocate at start-up;
    #  - libstdc++ (the Swift runtime's) linked statically, through a linker script named
    #    libstdc++.so found first, since the runtime's own flags ask for `-lstdc++`: the loader
    #    no longer binds its ~5000 symbols on every run;
    #  - no DWARF unwind tables (.eh_frame, 3.7 MB; scripts/release/no-unwind-tables.ld):
    #    Swift errors are return values, never unwound, and the Swift runtime and everything
    #    vendored is built without C++ exceptions. The one unwind at run time, glibc's when
    #    `dispatch_main` ends the main thread with pthread_exit, stops where it finds no
    #    table and jumps to the thread's exit (nothing of ours to clean up). perf, gdb and
    #    the Swift backtracer walk the frame pointers instead.
    static_cxx=$bin/static-libstdc++
    archive=$(clang -print-file-name=libstdc++.a 2>/dev/null || true)
    [[ -f $archive ]] || { echo "error: libstdc++.a not found (apt-get install libstdc++-12-dev)" >&2; exit 1; }
    mkdir -p "$static_cxx"
    printf 'INPUT(%s)\n' "$archive" > "$static_cxx/libstdc++.so"
    link_flags=(-Xswiftc -use-ld=lld -Xlinker --no-export-dynamic -Xlinker -z -Xlinker pack-relative-relocs
        -Xlinker --icf=all -Xswiftc -Xclang-linker -Xswiftc -no-pie -Xswiftc "-L$static_cxx"
        -Xlinker -T -Xlinker "$PWD/scripts/release/no-unwind-tables.ld")
    order_file=$PWD/scripts/release/offline-agent.order
    if [[ -f $order_file ]]; then
        link_flags+=(-Xlinker "--symbol-ordering-file=$order_file" -Xlinker --no-warn-symbol-ordering)
    fi
fi
if [[ $configuration == debug ]]; then
    # The debug objects were compiled for the shared Foundation libraries, whose own
    # dependencies their static archives do not name: list them, as a group (archive
    # members are only pulled in when referenced, so the device binary gains nothing).
    link_flags=(-Xlinker --start-group)
    for library in Foundation FoundationInternationalization FoundationEssentials CoreFoundation \
        _FoundationICU _FoundationCollections _FoundationCShims; do
        link_flags+=(-Xlinker "-l$library")
    done
    link_flags+=(-Xlinker --end-group)
fi
for product in "$@"; do
    # shellcheck disable=SC2086  # SWIFT_BUILD_FLAGS is a list of flags
    swift build -c "$configuration" --static-swift-stdlib "${compile_flags[@]}" "${link_flags[@]}" \
        ${SWIFT_BUILD_FLAGS:-} --product "$product"
done

check_no_icu() {  # check_no_icu BINARY (unstripped)
    local binary=$1 icu_symbols icu_strings
    # ICU's C API names carry its major version (u_strlen_74, ucol_open_74, ...) unless
    # renaming is off; either way they start with one of these prefixes.
    icu_symbols=$(nm "$binary" 2>/dev/null |
        grep -cE ' (icudt[0-9]+|(u|ucol|ubrk|ucal|udat|unum|uloc|ures|uset|utrans|uregex|ucnv|unorm2?|uidna|usearch|ucasemap)_[A-Za-z]+(_[0-9]+)?)$' || true)
    icu_strings=$(strings -n 6 "$binary" | grep -c 'icudt' || true)
    if (( icu_symbols > 0 || icu_strings > 0 )); then
        echo "error: $binary contains ICU ($icu_symbols ICU symbols, $icu_strings 'icudt' strings)" >&2
        return 1
    fi
    if ldd "$binary" 2>/dev/null | grep -qE 'libFoundation|_FoundationICU|libicu'; then
        echo "error: $binary links Foundation/ICU dynamically" >&2
        return 1
    fi
}

status=0
for product in "$@"; do
    binary="$bin/$product"
    [[ -x $binary ]] || continue
    if [[ $product == offline-agent ]]; then
        check_no_icu "$binary" || status=1
    fi
    if [[ ${KEEP_SYMBOLS:-0} == 1 ]]; then objcopy --strip-debug "$binary" "$binary.symbols"; fi
    strip "$binary"
    if [[ $product == offline-agent ]]; then
        strings -n 6 "$binary" | grep -q 'icudt' && { echo "error: stripped $binary contains 'icudt'" >&2; status=1; }
    fi
    size=$(stat -c %s "$binary")
    printf '%s: %s bytes (%.1f MiB), %s, stripped, static Swift runtime%s\n' "$product" "$size" \
        "$(awk -v b="$size" 'BEGIN { print b / 1048576 }')" "$configuration" \
        "$([[ $product == offline-agent && $status == 0 ]] && echo ', no ICU')"
done
exit $status
