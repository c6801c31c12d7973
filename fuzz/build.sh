#!/usr/bin/env bash
# Builds the libFuzzer targets into OUT (default .build-fuzz, git-ignored):
#   bspatch    cbspatch_apply on a hostile patch (C: ASan + UBSan)
#   cbz        CBspatch's own bzip2 decoder, checked against libbz2 (C: ASan + UBSan)
#   zip        ZipCentralDirectory.rawNames (Swift: ASan)
#   layout     ZipCentralDirectory's layout as the splitter, skeleton and view read it (Swift: ASan)
#   splitter   ZipLocalStream, the splitter's reader of a patch's unverified output, in varied chunks (Swift: ASan)
#   manifest   Manifest.decode (Swift: ASan)
#   setcookie  SetCookie.parse and CookieDate.parse (Swift: ASan)
# Swift has no -sanitize=undefined; its own overflow and bounds traps play that
# part (they are crashes to libFuzzer). The Swift targets compile the parser's
# source files directly with a harness, not the package: no dependency graph.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.build-fuzz}
mkdir -p "$out"

swiftc=$(command -v swiftc || echo /opt/swift/usr/bin/swiftc)
[[ -x $swiftc ]] || { echo "error: swiftc not found (a Swift 6 toolchain is required)" >&2; exit 1; }
toolchain=$(dirname "$(readlink -f "$swiftc")")

# The Swift toolchain's clang carries libFuzzer and the sanitizer runtimes;
# otherwise Debian's clang with libclang-rt-14-dev (scripts/fuzz.sh installs them).
can_fuzz() {
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
        "$1" -x c - -fsanitize=fuzzer,address,undefined -o "$out/.probe" >/dev/null 2>&1
}
cc=""
for candidate in "${FUZZ_CC:-}" "$toolchain/clang" clang clang-14; do
    [[ -n $candidate ]] && command -v "$candidate" >/dev/null && can_fuzz "$candidate" && { cc=$candidate; break; }
done
rm -f "$out/.probe"
[[ -n $cc ]] || { echo "error: no clang with libFuzzer (apt-get install clang libclang-rt-14-dev)" >&2; exit 3; }

cflags=(-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
        -ICBspatch/include)
cbspatch=(CBspatch/*.c) # the C target's sources, whatever its files by concern
"$cc" "${cflags[@]}" fuzz/fuzz_bspatch.c "${cbspatch[@]}" -lbz2 -lpthread -o "$out/bspatch"
"$cc" "${cflags[@]}" fuzz/fuzz_cbz.c "${cbspatch[@]}" -lbz2 -lpthread -o "$out/cbz"

# -package-name: the sources use `package` access (cross-target internals).
swiftflags=(-parse-as-library -swift-version 6 -package-name offline_agent -sanitize=fuzzer,address -O -g)
[[ -x $toolchain/ld.lld ]] && swiftflags+=(-use-ld=lld)
src=Sources/OfflineAgent
"$swiftc" "${swiftflags[@]}" fuzz/swift/FuzzZipCentralDirectory.swift \
    $src/Support/ZipCentralDirectory.swift $src/Support/Array+LittleEndian.swift $src/Support/{OfflineAgentError,POSIXFailure}.swift \
    -o "$out/zip"
"$swiftc" "${swiftflags[@]}" fuzz/swift/FuzzZipLayout.swift \
    $src/Support/ZipCentralDirectory.swift $src/Support/Array+LittleEndian.swift $src/Support/{OfflineAgentError,POSIXFailure}.swift \
    -o "$out/layout"
"$swiftc" "${swiftflags[@]}" fuzz/swift/FuzzZipSplitter.swift \
    $src/Support/{ZipLocalStream,ZipCentralDirectory,Array+LittleEndian,OfflineAgentError,POSIXFailure}.swift \
    -o "$out/splitter"
"$swiftc" "${swiftflags[@]}" fuzz/swift/FuzzManifest.swift \
    $src/Check/{Manifest,Manifest+Stage,ManifestFields,ManifestPatch,ManifestStageStep,StrictJSON,Version,AppName,RFC3339,SHA256Hex}.swift $src/Support/OfflineAgentError.swift \
    $src/Support/{WebAddress,UTCTime,String+ByteSplitting}.swift \
    -o "$out/manifest"
"$swiftc" "${swiftflags[@]}" fuzz/swift/FuzzSetCookie.swift \
    $src/Cookies/{SetCookie,CookieDate,Cookie,Cookie+WellFormed,CookieURL,PublicSuffixList}.swift \
    $src/Support/{WebAddress,UTCTime,String+ByteSplitting}.swift -o "$out/setcookie"
echo "fuzz targets built in $out with $cc and $swiftc"
