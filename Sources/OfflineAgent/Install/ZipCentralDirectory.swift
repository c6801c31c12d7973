import Foundation

/// A raw read of a zip's central directory names, for what libzip hides: it turns a
/// NUL inside a name into a space, so a name like `a\0.html` cannot be seen through its API.
enum ZipCentralDirectory {
    /// The raw name bytes of every central directory entry.
    static func rawNames(of path: String) throws -> [[UInt8]] {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw OfflineAgentError(.extract, "cannot open archive", cause: .io, path: path, underlying: POSIXFailure("open"))
        }
        defer { try? handle.close() }
        let fileSize = try handle.seekToEnd()
        // The end record is 22 bytes plus a comment of at most 65535 bytes.
        let tailLength = min(fileSize, 22 + 65535 + 20)
        try handle.seek(toOffset: fileSize - tailLength)
        let tail = [UInt8](try handle.readToEnd() ?? Data())
        guard let end = lastIndex(of: [0x50, 0x4b, 0x05, 0x06], in: tail), end + 22 <= tail.count else {
            throw OfflineAgentError(.extract, "no end of central directory record", cause: .archiveCorrupt, path: path)
        }
        var count = UInt64(tail.le16(end + 10))
        var size = UInt64(tail.le32(end + 12))
        var offset = UInt64(tail.le32(end + 16))
        if count == 0xFFFF || size == 0xFFFF_FFFF || offset == 0xFFFF_FFFF {
            // Zip64: the locator sits right before the end record and points at the zip64 end record.
            guard end >= 20, tail.le32(end - 20) == 0x0706_4b50 else {
                throw OfflineAgentError(.extract, "missing zip64 end locator", cause: .archiveCorrupt, path: path)
            }
            // The locator's offset is the archive's word: it must leave room for the 56-byte record.
            let recordOffset = tail.le64(end - 20 + 8)
            guard fileSize >= 56, recordOffset <= fileSize - 56 else {
                throw OfflineAgentError(.extract, "zip64 end record lies outside the file", cause: .archiveCorrupt, path: path)
            }
            try handle.seek(toOffset: recordOffset)
            let record = [UInt8](try handle.read(upToCount: 56) ?? Data())
            guard record.count == 56, record.le32(0) == 0x0606_4b50 else {
                throw OfflineAgentError(.extract, "bad zip64 end record", cause: .archiveCorrupt, path: path)
            }
            count = record.le64(32)
            size = record.le64(40)
            offset = record.le64(48)
        }
        guard offset <= fileSize, size <= fileSize - offset, count <= size / 46 + 1 else {
            throw OfflineAgentError(.extract, "central directory lies outside the file", cause: .archiveCorrupt, path: path)
        }
        try handle.seek(toOffset: offset)
        let directory = [UInt8](try handle.read(upToCount: Int(size)) ?? Data())
        var names: [[UInt8]] = []
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
            names.append(Array(directory[(cursor + 46)..<(cursor + 46 + nameLength)]))
            cursor += 46 + nameLength + extraLength + commentLength
        }
        return names
    }

    private static func lastIndex(of pattern: [UInt8], in bytes: [UInt8]) -> Int? {
        guard bytes.count >= pattern.count else { return nil }
        var index = bytes.count - pattern.count
        while index >= 0 {
            if bytes[index] == pattern[0], Array(bytes[index..<(index + pattern.count)]) == pattern { return index }
            index -= 1
        }
        return nil
    }
}
