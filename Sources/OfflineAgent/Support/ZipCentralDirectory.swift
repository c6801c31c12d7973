#if canImport(Glibc)
import Glibc
#endif

/// The one reader of a zip's layout besides libzip: its central directory (entries,
/// methods, CRCs, sizes, local header offsets, raw names), its local headers, and the
/// rule for "a plain stored zip" (`notPlainStored`). libzip stays the reader of record
/// for what it reads (extraction, its consistency checks); this reads what it hides
/// (a NUL inside a name becomes a space there, so `a\0.html` cannot be seen through
/// its API) and what the store needs to split a package into objects and a skeleton:
/// the splitter (local headers as they stream), the skeleton and the view.
///
/// Pure over bytes (no Crypto, no NIO): `fuzz/build.sh` compiles it on its own.
package enum ZipCentralDirectory {
    /// The fields of one central directory entry that the store's skeleton needs.
    struct Entry: Sendable {
        var name: [UInt8]
        /// The general purpose flags (bit 0: encrypted, bit 3: data descriptor).
        var flags: UInt16
        var method: UInt16
        var crc32: UInt32
        /// 0xFFFFFFFF when the real value is in a zip64 extra field.
        var compressedSize: UInt32
        var size: UInt32
        var localHeaderOffset: UInt32

        /// Why this entry is not plain stored, or nil when it is.
        var notPlainStored: String? {
            ZipCentralDirectory.notPlainStored(flags: flags, method: method, compressedSize: compressedSize, size: size)
        }
    }

    /// The raw name bytes of every central directory entry.
    package static func rawNames(of path: String) throws -> [[UInt8]] {
        try entries(of: path).map(\.name)
    }

    /// Every central directory entry, in order (libzip's index order).
    static func entries(of path: String) throws -> [Entry] {
        try withFile(path) { size, read in try entries(size: size, path: path, read: read) }
    }

    /// `body` over the file at `path`: its size and a reader of its bytes.
    static func withFile<T>(_ path: String, _ body: (UInt64, (UInt64, Int) throws -> [UInt8]) throws -> T) throws -> T {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw OfflineAgentError(.extract, "cannot open archive", cause: .io, path: path, underlying: POSIXFailure("open"))
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw OfflineAgentError(.extract, "cannot stat archive", cause: .io, path: path, underlying: POSIXFailure("fstat"))
        }
        return try body(UInt64(max(0, st.st_size))) { offset, count in
            try read(fd, at: offset, count: count, path: path)
        }
    }

    /// The same for an archive of `size` bytes read through `read` (offset, count → up
    /// to count bytes, fewer only at the end): a package that is a skeleton and objects.
    static func entries(size fileSize: UInt64, path: String, read: (UInt64, Int) throws -> [UInt8]) throws -> [Entry] {
        // The end record is 22 bytes plus a comment of at most 65535 bytes.
        let tailLength = min(fileSize, 22 + 65535 + 20)
        let tail = try read(fileSize - tailLength, Int(tailLength))
        let end = try endRecord(in: tail, path: path)
        var count = UInt64(tail.le16(end + 10))
        var size = UInt64(tail.le32(end + 12))
        var offset = UInt64(tail.le32(end + 16))
        let saturated = count == 0xFFFF || size == 0xFFFF_FFFF || offset == 0xFFFF_FFFF
        // libzip reads the zip64 end record whenever its locator sits right before the end
        // record, saturated fields or not: so does this reader, or the two could read two
        // different central directories.
        let hasLocator = end >= 20 && tail.le32(end - 20) == 0x0706_4b50
        if saturated || hasLocator {
            guard hasLocator else {
                throw OfflineAgentError(.extract, "missing zip64 end locator", cause: .archiveCorrupt, path: path)
            }
            // The locator's offset is the archive's word: it must leave room for the 56-byte record.
            let recordOffset = tail.le64(end - 20 + 8)
            guard fileSize >= 56, recordOffset <= fileSize - 56 else {
                throw OfflineAgentError(.extract, "zip64 end record lies outside the file", cause: .archiveCorrupt, path: path)
            }
            let record = try read(recordOffset, 56)
            guard record.count == 56, record.le32(0) == 0x0606_4b50 else {
                throw OfflineAgentError(.extract, "bad zip64 end record", cause: .archiveCorrupt, path: path)
            }
            // A field that is not saturated must say what the zip64 record says: otherwise which
            // central directory is meant depends on the reader.
            guard count == 0xFFFF || count == record.le64(32), size == 0xFFFF_FFFF || size == record.le64(40),
                  offset == 0xFFFF_FFFF || offset == record.le64(48) else {
                throw OfflineAgentError(.extract, "end record and zip64 end record disagree", cause: .hostileArchive, path: path)
            }
            count = record.le64(32)
            size = record.le64(40)
            offset = record.le64(48)
        }
        guard offset <= fileSize, size <= fileSize - offset, count <= size / 46 + 1 else {
            throw OfflineAgentError(.extract, "central directory lies outside the file", cause: .archiveCorrupt, path: path)
        }
        let directory = try read(offset, Int(size))
        var names: [Entry] = []
        var cursor = 0
        for _ in 0..<count {
            guard cursor + 46 <= directory.count, directory.le32(cursor) == 0x0201_4b50 else {
                throw OfflineAgentError(.extract, "corrupt central directory", cause: .archiveCorrupt, path: path)
            }
            let nameLength = Int(directory.le16(cursor + 28))
            let extraLength = Int(directory.le16(cursor + 30))
            let commentLength = Int(directory.le16(cursor + 32))
            guard cursor + 46 + nameLength <= directory.count else {
                throw OfflineAgentError(.extract, "corrupt central directory", cause: .archiveCorrupt, path: path)
            }
            names.append(Entry(
                name: Array(directory[(cursor + 46)..<(cursor + 46 + nameLength)]), flags: directory.le16(cursor + 8),
                method: directory.le16(cursor + 10),
                crc32: directory.le32(cursor + 16),
                compressedSize: directory.le32(cursor + 20), size: directory.le32(cursor + 24),
                localHeaderOffset: directory.le32(cursor + 42)))
            cursor += 46 + nameLength + extraLength + commentLength
        }
        return names
    }

    /// A local file header's fixed part: `LocalHeader.size` bytes at an entry's local header offset.
    struct LocalHeader: Sendable, Equatable {
        /// The fixed part's length; the name and the extra field follow it.
        static let size = 30
        static let signature: UInt32 = 0x0403_4b50
        var flags: UInt16
        var method: UInt16
        var crc32: UInt32
        var compressedSize: UInt32
        var size: UInt32
        var nameLength: Int
        var extraLength: Int
        /// The whole header's length: where the entry's data starts, from the header's offset.
        var length: Int { Self.size + nameLength + extraLength }

        /// The header in `bytes` (at least `size` of them, from its signature on); nil
        /// without the local header signature or with too few bytes.
        init?(_ bytes: [UInt8]) {
            guard bytes.count >= Self.size, bytes.le32(0) == Self.signature else { return nil }
            flags = bytes.le16(6)
            method = bytes.le16(8)
            crc32 = bytes.le32(14)
            compressedSize = bytes.le32(18)
            size = bytes.le32(22)
            nameLength = Int(bytes.le16(26))
            extraLength = Int(bytes.le16(28))
        }

        /// Why this entry is not plain stored, or nil when it is.
        var notPlainStored: String? {
            ZipCentralDirectory.notPlainStored(flags: flags, method: method, compressedSize: compressedSize, size: size)
        }
    }

    /// The signatures of the records a zip's local entries may be followed by.
    static let centralSignature: UInt32 = 0x0201_4b50
    static let endSignature: UInt32 = 0x0605_4b50

    /// The rule for "a plain stored zip", entry by entry, defined here only: an entry is
    /// plain stored when its bytes in the archive are the file's bytes, nothing around or
    /// in them to decode: not encrypted, no data descriptor, method 0 (stored), and both
    /// sizes given, equal and not zip64's 0xFFFFFFFF. A zip is plain stored when every
    /// entry is. Returns why not, or nil.
    static func notPlainStored(flags: UInt16, method: UInt16, compressedSize: UInt32, size: UInt32) -> String? {
        if flags & 0x0001 != 0 { return "an entry is encrypted" }
        if flags & 0x0008 != 0 { return "an entry has a data descriptor" }
        if method != 0 { return "an entry is compressed (method \(method))" }
        if compressedSize != size || size == 0xFFFF_FFFF { return "an entry has zip64 or inconsistent sizes" }
        return nil
    }

    /// Where each non-empty entry's bytes are, for an archive of `fileSize` bytes read
    /// through `read` (as `entries(size:path:read:)`): by central directory order, the
    /// entry and the range of its data (after its local header), when the entry is plain
    /// stored and its local header and data lie inside the file; nil otherwise (then the
    /// archive is no plain stored zip). Every offset is the archive's word: checked, never trusted.
    static func storedData(size fileSize: UInt64, path: String, read: (UInt64, Int) throws -> [UInt8]) throws -> [(index: Int, entry: Entry, start: UInt64)]? {
        let entries = try entries(size: fileSize, path: path, read: read)
        var stored: [(index: Int, entry: Entry, start: UInt64)] = []
        for (index, entry) in entries.enumerated() where entry.compressedSize > 0 {
            guard entry.notPlainStored == nil,
                  entry.localHeaderOffset != 0xFFFF_FFFF,
                  let header = LocalHeader(try read(UInt64(entry.localHeaderOffset), LocalHeader.size)) else { return nil }
            let start = UInt64(entry.localHeaderOffset) + UInt64(header.length)
            guard start <= fileSize, UInt64(entry.size) <= fileSize - start else { return nil }
            stored.append((index, entry, start))
        }
        return stored
    }

    /// Where the end record is in `tail` (the file's last bytes): the one libzip can take.
    ///
    /// libzip (`ZIP_CHECKCONS`, as every archive here is opened) only accepts an end
    /// record whose comment reaches exactly the end of the file, and among several such
    /// keeps the one whose entries span most: a record hidden in another's comment can
    /// name a second central directory. Taking the last signature, as readers commonly
    /// do, would then read other entries than libzip (other local header offsets for
    /// the same names), so more than one acceptable record is refused as hostile. With
    /// none, the last signature is read and libzip refuses the archive when it opens it.
    private static func endRecord(in tail: [UInt8], path: String) throws -> Int {
        var acceptable: [Int] = []
        var last: Int?
        var index = tail.count - 22
        while index >= 0 {
            if tail[index] == 0x50, tail[index + 1] == 0x4b, tail[index + 2] == 0x05, tail[index + 3] == 0x06 {
                if last == nil { last = index }
                if index + 22 + Int(tail.le16(index + 20)) == tail.count { acceptable.append(index) }
            }
            index -= 1
        }
        guard acceptable.count <= 1 else {
            throw OfflineAgentError(.extract, "more than one end of central directory record", cause: .hostileArchive, path: path)
        }
        guard let end = acceptable.first ?? last else {
            throw OfflineAgentError(.extract, "no end of central directory record", cause: .archiveCorrupt, path: path)
        }
        return end
    }

    /// Up to `count` bytes at `offset` (fewer at the end of the file).
    private static func read(_ fd: Int32, at offset: UInt64, count: Int, path: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                pread(fd, buffer.baseAddress! + filled, count - filled, off_t(offset) + off_t(filled))
            }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else {
                throw OfflineAgentError(.extract, "cannot read archive", cause: .io, path: path, underlying: POSIXFailure("pread"))
            }
            if n == 0 { break }
            filled += n
        }
        bytes.removeLast(count - filled)
        return bytes
    }
}
