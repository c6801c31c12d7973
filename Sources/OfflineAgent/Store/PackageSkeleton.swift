import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What the store keeps of an installed package instead of the zip: every byte that is
/// not a stored file's content (local headers, central directory, end record) and, for
/// each stored file, the object that holds its bytes. The package is then its objects
/// plus a few % of its size, and `PackageView` reads it back byte for byte as the old
/// input of the next patch.
///
/// File layout (`packages/<v>.skel`, all integers little-endian):
/// ```
/// "OASKEL01"  package size (u64)  segment count (u64)
/// per segment: kind (u8: 0 skeleton bytes, 1 object)  length (u64)
///              for an object: name length (u8) and name (`<sha256>` or `<sha256>.x`)
/// the skeleton bytes, the kind-0 segments back to back
/// ```
/// Segments cover the package from offset 0 in order, without gaps.
struct PackageSkeleton: Sendable, Equatable {
    enum Source: Sendable, Equatable {
        /// `length` bytes at this offset of the skeleton bytes.
        case skeleton(offset: Int64)
        case object(String)
    }

    struct Segment: Sendable, Equatable {
        /// Where the segment starts in the package.
        var start: Int64
        var length: Int64
        var source: Source
    }

    static let magic = Array("OASKEL01".utf8)
    /// Segments a skeleton may have: two per entry of the largest package the limits admit, and some.
    static let maxSegments = 1 << 21

    var packageSize: Int64
    var segments: [Segment]
    /// Where the skeleton bytes start in the file.
    var dataOffset: Int64

    /// The segments of a stored package whose file entries (by libzip index = central
    /// directory order) are the objects `objectNames` names; nil when the package cannot
    /// be kept this way (not a plain stored zip, `ZipCentralDirectory.notPlainStored`; an entry without an object):
    /// then the zip itself is kept.
    static func segments(of package: String, objectNames: [Int64: String]) -> (size: Int64, segments: [(start: Int64, length: Int64, object: String?)])? {
        // Where each entry's bytes are, by the one layout reader and its rule for a plain stored zip.
        guard case let (fileSize, data)? = try? ZipCentralDirectory.withFile(package, { size, read in
            try ZipCentralDirectory.storedData(size: size, path: package, read: read).map { (size, $0) }
        }) else { return nil }
        let size = Int64(fileSize)
        var stored: [(start: Int64, length: Int64, object: String)] = []
        for entry in data {
            guard let object = objectNames[Int64(entry.index)] else { return nil }
            stored.append((Int64(entry.start), Int64(entry.entry.size), object))
        }
        stored.sort { $0.start < $1.start }
        var segments: [(start: Int64, length: Int64, object: String?)] = []
        var cursor: Int64 = 0
        for piece in stored {
            // libzip's consistency check refuses overlapping entries; a skeleton must not rely on it.
            guard piece.start >= cursor else { return nil }
            if piece.start > cursor { segments.append((cursor, piece.start - cursor, nil)) }
            segments.append((piece.start, piece.length, piece.object))
            cursor = piece.start + piece.length
        }
        if cursor < size { segments.append((cursor, size - cursor, nil)) }
        guard segments.count <= maxSegments else { return nil }
        return (size, segments)
    }

    /// Writes the skeleton of `package` to `path` atomically (temp, rename), not flushed:
    /// only an install writes a skeleton, and its one `syncfs` flushes it before the swap.
    /// - Returns: false when the package cannot be kept as a skeleton (see `segments`).
    static func write(of package: String, objectNames: [Int64: String], to path: String) throws -> Bool {
        guard let (size, segments) = segments(of: package, objectNames: objectNames) else { return false }
        let fd = open(package, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(package)") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        for segment in segments where segment.object == nil {
            let start = bytes.count
            bytes.append(contentsOf: repeatElement(0, count: Int(segment.length)))
            let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + start, Int(segment.length), off_t(segment.start)) }
            guard got == Int(segment.length) else { throw POSIXFailure("read \(package)") }
        }
        try write(size: size, segments: segments, skeletonBytes: bytes, to: path)
        return true
    }

    /// Writes a skeleton atomically (temp, rename; not flushed, as above) from its segments (covering the
    /// package in order) and the bytes of its skeleton segments back to back: a kept
    /// zip's, or what a streamed patch's output left after its objects.
    static func write(size: Int64, segments: [(start: Int64, length: Int64, object: String?)], skeletonBytes: [UInt8], to path: String) throws {
        var out = magic
        out.appendLittleEndian(UInt64(size))
        out.appendLittleEndian(UInt64(segments.count))
        for segment in segments {
            out.append(segment.object == nil ? 0 : 1)
            out.appendLittleEndian(UInt64(segment.length))
            if let object = segment.object {
                out.append(UInt8(object.utf8.count))
                out.append(contentsOf: object.utf8)
            }
        }
        out.append(contentsOf: skeletonBytes)
        try FileSystem.writeAtomically(Data(out), to: path, mode: 0o444, durable: false)
    }

    /// Reads and checks a skeleton file: every length and name bounded, segments
    /// covering exactly the package, skeleton bytes exactly as long as they say.
    static func read(_ fd: Int32, fileSize: Int64) -> PackageSkeleton? {
        func bytes(_ offset: Int64, _ count: Int) -> [UInt8]? {
            guard count >= 0, offset >= 0, offset + Int64(count) <= fileSize else { return nil }
            var buffer = [UInt8](repeating: 0, count: count)
            let got = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, count, off_t(offset)) }
            return got == count ? buffer : nil
        }
        guard let head = bytes(0, 24), Array(head[0..<8]) == magic else { return nil }
        let size = head.le64(8), count = head.le64(16)
        guard size <= UInt64(Int64.max), count <= UInt64(maxSegments) else { return nil }
        // The table: at most 1 + 8 + 1 + 255 bytes a segment; read it in one go, bounded.
        let tableLimit = min(fileSize - 24, Int64(count) * 265)
        guard let table = bytes(24, Int(tableLimit)) else { return nil }
        var segments: [Segment] = []
        segments.reserveCapacity(Int(count))
        var cursor = 0
        var start: Int64 = 0, skeletonBytes: Int64 = 0
        for _ in 0..<count {
            guard cursor + 9 <= table.count else { return nil }
            let kind = table[cursor], length = table.le64(cursor + 1)
            cursor += 9
            guard length <= UInt64(Int64(size) - start) else { return nil }
            switch kind {
            case 0:
                segments.append(Segment(start: start, length: Int64(length), source: .skeleton(offset: skeletonBytes)))
                skeletonBytes += Int64(length)
            case 1:
                guard cursor < table.count else { return nil }
                let nameLength = Int(table[cursor])
                guard cursor + 1 + nameLength <= table.count else { return nil }
                let name = String(decoding: table[(cursor + 1)..<(cursor + 1 + nameLength)], as: UTF8.self)
                guard isObjectName(name) else { return nil }
                segments.append(Segment(start: start, length: Int64(length), source: .object(name)))
                cursor += 1 + nameLength
            default:
                return nil
            }
            start += Int64(length)
        }
        let dataOffset = 24 + Int64(cursor)
        guard start == Int64(size), dataOffset + skeletonBytes == fileSize else { return nil }
        return PackageSkeleton(packageSize: Int64(size), segments: segments, dataOffset: dataOffset)
    }

    /// `<64 hex>` or `<64 hex>.x`: nothing that could name a path outside `objects/`.
    static func isObjectName(_ name: String) -> Bool {
        let hex = name.hasSuffix(".x") ? String(name.dropLast(2)) : name
        return SHA256Hex.isValid(hex)
    }

    /// The segment holding package offset `offset` (binary search).
    func segment(at offset: Int64) -> Int? {
        var low = 0, high = segments.count - 1
        while low <= high {
            let mid = (low + high) / 2
            let segment = segments[mid]
            if offset < segment.start { high = mid - 1 } else if offset >= segment.start + segment.length { low = mid + 1 } else { return mid }
        }
        return nil
    }
}
