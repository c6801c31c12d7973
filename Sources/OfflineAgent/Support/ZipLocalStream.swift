/// A zip's local entries as its bytes stream in, for the splitter of a patch's output:
/// which bytes are local headers (and, after the last entry, the central directory and
/// end record: the tail) and which are an entry's data. Each local header is read by
/// `ZipCentralDirectory.LocalHeader` and judged by its plain-stored rule. Nothing here
/// is trusted (the bytes are verified only once the whole stream is): every length is
/// the archive's word, bounded by what arrives. Pure over bytes, so `fuzz/build.sh`
/// compiles it on its own (target `splitter`).
struct ZipLocalStream: Sendable {
    /// What the next bytes of the stream are.
    enum Piece: Sendable, Equatable {
        /// Bytes of a local header or of the tail: the skeleton's.
        case skeleton
        /// A local header is complete (its bytes came as `.skeleton`): its entry, whose
        /// data follows, and the offset of the header. Takes no bytes.
        case entry(ZipCentralDirectory.LocalHeader, name: [UInt8], headerOffset: UInt64)
        /// Bytes of the current entry's data.
        case data
        /// Not a plain stored zip from here on (or not a zip): the stream must stop.
        case notPlain(String)
    }

    private enum State: Sendable { case header, entry, data, tail }
    private var state = State.header
    /// The header being received, from its signature on.
    private var header: [UInt8] = []
    private var headerLength = ZipCentralDirectory.LocalHeader.size
    private var local: ZipCentralDirectory.LocalHeader?
    private var headerOffset: UInt64 = 0
    /// Bytes taken so far: the offset of the next byte.
    private(set) var position: UInt64 = 0
    /// The current entry's data bytes still to come.
    private(set) var remaining: UInt64 = 0

    /// Whether the stream is past its entries, where a package may end.
    var isInTail: Bool { state == .tail }
    /// Whether a piece that takes no bytes is due (`.entry`): ask for it even with no bytes left.
    var hasPendingEntry: Bool { state == .entry }

    /// The next piece of `bytes`, and how many of them it takes (0 for `.entry` and
    /// `.notPlain`). After `.notPlain`, the stream must not be fed again.
    mutating func next(_ bytes: UnsafeRawBufferPointer) -> (piece: Piece, count: Int) {
        switch state {
        case .tail:
            position += UInt64(bytes.count)
            return (.skeleton, bytes.count)
        case .data:
            let count = Int(min(remaining, UInt64(bytes.count)))
            position += UInt64(count)
            remaining -= UInt64(count)
            if remaining == 0 { state = .header }
            return (.data, count)
        case .entry:
            // `.entry` follows a header whose fixed part parsed and whose name and extra field are in.
            guard let parsed = local else { return (.notPlain("no local header"), 0) }
            let nameStart = ZipCentralDirectory.LocalHeader.size
            let entry = Piece.entry(parsed, name: Array(header[nameStart..<(nameStart + parsed.nameLength)]), headerOffset: headerOffset)
            remaining = UInt64(parsed.size)
            header.removeAll(keepingCapacity: true)
            headerLength = ZipCentralDirectory.LocalHeader.size
            local = nil
            state = remaining == 0 ? .header : .data
            return (entry, 0)
        case .header:
            return takeHeader(bytes)
        }
    }

    private mutating func takeHeader(_ bytes: UnsafeRawBufferPointer) -> (piece: Piece, count: Int) {
        if header.isEmpty { headerOffset = position }
        // The signature first, on its own: it decides how long the record is.
        let want = min((header.count < 4 ? 4 : headerLength) - header.count, bytes.count)
        header.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<want]))
        position += UInt64(want)
        if header.count == 4 {
            switch header.le32(0) {
            case ZipCentralDirectory.LocalHeader.signature: break
            case ZipCentralDirectory.centralSignature, ZipCentralDirectory.endSignature:
                // The central directory (or an empty archive's end record): the rest is skeleton.
                state = .tail
                return (.skeleton, want)
            default:
                return (.notPlain("unexpected record 0x\(String(header.le32(0), radix: 16))"), want)
            }
        }
        if header.count == ZipCentralDirectory.LocalHeader.size, local == nil {
            // The signature is a local header's (checked above): the fixed part parses.
            guard let parsed = ZipCentralDirectory.LocalHeader(header) else {
                return (.notPlain("unexpected record 0x\(String(header.le32(0), radix: 16))"), want)
            }
            if let why = parsed.notPlainStored { return (.notPlain(why), want) }
            local = parsed
            headerLength = parsed.length
        }
        if local != nil, header.count == headerLength { state = .entry }
        return (.skeleton, want)
    }
}
