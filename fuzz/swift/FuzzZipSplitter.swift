/// libFuzzer target: the splitter's reader of a patch's unverified output,
/// `ZipLocalStream` (what `PatchedPackageSplitter` feeds every chunk through), over the
/// input cut into chunks of varied sizes (seeded by the input's length, so one input is
/// one run). Checked as the splitter relies on it: every piece takes no more bytes than
/// it was given, the position counts exactly the bytes taken, an entry's data never runs
/// past its local header's size, every entry is plain stored and its header lies before
/// the position, and each step makes progress (no loop without end).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzZipSplitter(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: data, count: size)
    var stream = ZipLocalStream()
    var seed = UInt64(size) &* 0x9E37_79B9_7F4A_7C15 | 1
    var offset = 0, taken: UInt64 = 0
    var entryLeft: UInt64 = 0
    var steps = 0
    feeding: while offset < size || stream.hasPendingEntry {
        seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        let chunk = min(size - offset, 1 + Int(seed >> 58))  // 1…64 bytes, the splitter's chunks in small
        var rest = UnsafeRawBufferPointer(rebasing: input[offset..<(offset + chunk)])
        offset += chunk
        while !rest.isEmpty || stream.hasPendingEntry {
            steps += 1
            guard steps <= 4 * size + 16 else { fatalError("no progress after \(steps) steps") }
            let (piece, count) = stream.next(rest)
            guard count >= 0, count <= rest.count else { fatalError("took \(count) of \(rest.count) bytes") }
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
            taken += UInt64(count)
            guard stream.position == taken else { fatalError("position \(stream.position), taken \(taken)") }
            switch piece {
            case .skeleton:
                guard entryLeft == 0 else { fatalError("header bytes inside an entry's data") }
            case .data:
                guard UInt64(count) <= entryLeft, count > 0 else { fatalError("\(count) data bytes, \(entryLeft) left in the entry") }
                entryLeft -= UInt64(count)
            case .entry(let header, let name, let headerOffset):
                guard count == 0, entryLeft == 0, header.notPlainStored == nil, name.count == header.nameLength,
                      headerOffset + UInt64(header.length) == taken else {
                    fatalError("entry at \(headerOffset) (\(header.length) header bytes) reported at \(taken)")
                }
                entryLeft = UInt64(header.size)
            case .notPlain:
                break feeding
            }
        }
    }
    // Ending in the tail means every entry's data came whole.
    if stream.isInTail, entryLeft != 0 { fatalError("tail with \(entryLeft) bytes of an entry missing") }
    return 0
}
