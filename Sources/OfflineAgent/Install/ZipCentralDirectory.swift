#if canImport(Glibc)
import Glibc
#endif

/// A raw read of a zip's central directory names, for what libzip hides: it turns a
/// NUL inside a name into a space, so a name like `a\0.html` cannot be seen through its API.
package enum ZipCentralDirectory {
    /// The fields of one central directory entry that the store's skeleton needs.
    struct Entry: Sendable {
        var name: [UInt8]
        var method: UInt16
        var crc32: UInt32
        /// 0xFFFFFFFF when the real value is in a zip64 extra field.
        var compressedSize: UInt32
        var size: UInt32
        var localHeaderOffset: UInt32
    }

    /// The raw name bytes of every central directory entry.
    package static func rawNames(of path: String) throws -> [[UInt8]] {
        try entries(of: path).map(\.name)
    }

    /// Every central directory entry, in order (libzip's index order).
    static func entries(of path: String) throws -> [Entry] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw OfflineAgentError(.extract, "cannot open archive", cause: .io, path: path, underlying: POSIXFailure("open"))
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw OfflineAgentError(.extract, "cannot stat archive", cause: .io, path: path, underlying: POSIXFailure("fstat"))
        }
        return try entries(size: UInt64(max(0, st.st_size)), path: path) { offset, count in
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
                name: Array(directory[(cursor + 46)..<(cursor + 46 + nameLength)]), method: directory.le16(cursor + 10),
                crc32: directory.le32(cursor + 16),
                compressedSize: directory.le32(cursor + 20), size: directory.le32(cursor + 24),
                localHeaderOffset: directory.le32(cursor + 42)))
            cursor += 46 + nameLength + extraLength + commentLength
        }
        return names
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
