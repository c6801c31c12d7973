import FoundationEssentials
import Hummingbird
import OfflineAgent
import OfflineHTTP
import Synchronization

/// Per-file work the server would otherwise redo on every request: `Resolver.file`'s
/// checks (percent-decoding, an `lstat` per path component), the content type, the
/// validator strings, and the bytes of small files.
///
/// Keys name a version directory, whose files never change once installed (a new
/// version gets a new directory; reinstalling or rolling back writes a new record),
/// so an answer stays right while the directory exists and its record is the one
/// pinned: file contents (up to `LocalServerResponder.keepLimit` bytes each) are kept
/// with the record identity they were read under and used only under that same one.
/// Larger files are opened per request. A failed open drops the entry. Bounded: cleared
/// when it grows past `limit` entries or `byteLimit` bytes of contents.
final class LocalFileCache: Sendable {
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

    /// The whole bytes of a small file, read under the record `record`.
    struct Content {
        var record: FileFingerprint
        var body: ByteBuffer
        var validators: Validators
    }

    struct Entry {
        var path: String
        var contentType: String
        var validators: Validators?
        var content: Content?
    }

    static let limit = 4096
    static let byteLimit = 64 << 20
    private struct State {
        var entries: [Key: Entry] = [:]
        var contentBytes = 0
    }
    private let state = Mutex(State())

    /// A file of a version directory; two strings, not one joined, so a lookup builds none.
    private struct Key: Hashable {
        var directory: String
        var rest: String
    }

    private static func key(_ directory: String, _ rest: String) -> Key { Key(directory: directory, rest: rest) }

    /// The file `rest` (percent-encoded) names inside `directory`, as `Resolver.file` decides.
    func resolve(_ rest: String, in directory: String) -> Entry? {
        let key = Self.key(directory, rest)
        if let entry = state.withLock({ $0.entries[key] }) { return entry }
        guard let path = Resolver.file(at: rest, in: directory) else { return nil }
        let entry = Entry(path: path, contentType: LocalContentType.of(path: path))
        state.withLock { state in
            if state.entries.count >= Self.limit {
                state.entries.removeAll(keepingCapacity: true)
                state.contentBytes = 0
            }
            state.entries[key] = entry
        }
        return entry
    }

    /// The kept bytes of `rest` in `directory`, when read under `record`.
    func content(_ rest: String, in directory: String, record: FileFingerprint) -> Content? {
        let key = Self.key(directory, rest)
        return state.withLock { state in
            guard let content = state.entries[key]?.content, content.record == record else { return nil }
            return content
        }
    }

    /// Keeps the bytes of a small file read under `record`.
    func keep(_ content: Content, for rest: String, in directory: String) {
        let key = Self.key(directory, rest)
        let size = content.body.readableBytes
        state.withLock { state in
            guard state.entries[key] != nil else { return }
            if state.contentBytes + size > Self.byteLimit {
                for name in Array(state.entries.keys) { state.entries[name]?.content = nil }
                state.contentBytes = 0
            }
            state.contentBytes += size - (state.entries[key]?.content?.body.readableBytes ?? 0)
            state.entries[key]?.content = content
        }
    }

    /// Forgets `rest` in `directory` (its file could not be opened).
    func forget(_ rest: String, in directory: String) {
        let key = Self.key(directory, rest)
        state.withLock { state in
            state.contentBytes -= state.entries.removeValue(forKey: key)?.content?.body.readableBytes ?? 0
        }
    }

    /// The ETag and Last-Modified of an open file of `version`.
    ///
    /// ETag: version, inode, size and time — a new install extracts new files, and a
    /// rollback brings back the old ones with their old tags. Last-Modified: the later
    /// of the file's time and its version record's (a rollback rewrites the record, so
    /// `If-Modified-Since` from the newer version doesn't match the older files).
    func validators(_ rest: String, in directory: String, file: LocalOpenFile, version: String, recordModified: Int) -> Validators {
        let key = Self.key(directory, rest)
        if let cached = state.withLock({ $0.entries[key]?.validators }), cached.inode == file.inode, cached.size == file.size,
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
        state.withLock { $0.entries[key]?.validators = validators }
        return validators
    }
}
