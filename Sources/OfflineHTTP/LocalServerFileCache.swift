import Foundation
import OfflineAgent

/// Per-file work the server would otherwise redo on every request: `Resolver.file`'s
/// checks (percent-decoding, an `lstat` per path component), the content type, and
/// the validator strings.
///
/// Keys name a version directory, whose files never change once installed (new
/// versions get new directories), so a positive answer stays right for as long as the
/// directory exists; the file is still opened on every request, and a failed open
/// drops the entry. Validators are reused only while the open file's identity, size
/// and time and the record's time are the same. Bounded: cleared when it grows past
/// `limit` entries.
final class LocalFileCache: @unchecked Sendable {
    struct Validators {
        var inode: UInt64
        var size: Int64
        var seconds: Int
        var nanoseconds: Int
        var recordModified: Int
        /// Seconds since 1970 of `lastModified`.
        var modified: Int
        var etag: String
        var lastModified: String
    }

    struct Entry {
        var path: String
        var contentType: String
        var validators: Validators?
    }

    static let limit = 4096
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]

    private static func key(_ directory: String, _ rest: String) -> String { "\(directory)\u{0}\(rest)" }

    /// The file `rest` (percent-encoded) names inside `directory`, as `Resolver.file` decides.
    func resolve(_ rest: String, in directory: String) -> Entry? {
        let key = Self.key(directory, rest)
        if let entry = lock.withLock({ entries[key] }) { return entry }
        guard let path = Resolver.file(at: rest, in: directory) else { return nil }
        let entry = Entry(path: path, contentType: LocalContentType.of(path: path))
        lock.withLock {
            if entries.count >= Self.limit { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
        return entry
    }

    /// Forgets `rest` in `directory` (its file could not be opened).
    func forget(_ rest: String, in directory: String) {
        let key = Self.key(directory, rest)
        _ = lock.withLock { entries.removeValue(forKey: key) }
    }

    /// The ETag and Last-Modified of an open file of `version`.
    ///
    /// ETag: version, inode, size and time — a new install extracts new files, and a
    /// rollback brings back the old ones with their old tags. Last-Modified: the later
    /// of the file's time and its version record's (a rollback rewrites the record, so
    /// `If-Modified-Since` from the newer version doesn't match the older files).
    func validators(_ rest: String, in directory: String, file: LocalOpenFile, version: String, recordModified: Int) -> Validators {
        let key = Self.key(directory, rest)
        if let cached = lock.withLock({ entries[key]?.validators }), cached.inode == file.inode, cached.size == file.size,
           cached.seconds == file.modifiedSeconds, cached.nanoseconds == file.modifiedNanoseconds,
           cached.recordModified == recordModified {
            return cached
        }
        let modified = max(file.modifiedSeconds, recordModified)
        let etag = "\"\(version)-\(String(file.inode, radix: 16))-\(String(file.size, radix: 16))-"
            + "\(String(file.modifiedSeconds, radix: 16)).\(String(file.modifiedNanoseconds, radix: 16))\""
        let validators = Validators(
            inode: file.inode, size: file.size, seconds: file.modifiedSeconds, nanoseconds: file.modifiedNanoseconds,
            recordModified: recordModified, modified: modified, etag: etag,
            lastModified: HTTPValidators.httpDate(secondsSince1970: modified))
        lock.withLock { entries[key]?.validators = validators }
        return validators
    }
}
