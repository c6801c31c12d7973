import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The last step of a sync run by another process (the CLI, the timer), as that process
/// leaves it in `<root>/apps/<app>/.progress` for the D-Bus service, which sends it on as
/// `Progress` (docs/DBUS.md, "Signals").
///
/// The file is one small JSON object, `{"phase":"downloading","bytes":N,"total":M}`,
/// replaced atomically by `ProgressRecordWriter`. Its name starts with a dot, so the next
/// sync's clean-up removes what a crashed one left. The service reads it with a size cap
/// and takes nothing it cannot check: the root is the service's own user's, but a record
/// that does not parse is skipped, never trusted.
public struct ProgressRecord: Sendable, Equatable, Codable {
    /// A `ProgressEvent.Phase` raw value.
    public var phase: String
    /// Bytes done (downloads; 0 otherwise).
    public var bytes: UInt64
    /// Bytes expected (downloads; 0 otherwise).
    public var total: UInt64

    /// The record's file name in the app's directory.
    public static let fileName = ".progress"
    /// Where the writer writes before renaming over `fileName`.
    static let temporaryName = ".progress.tmp"
    /// The most bytes a record may have: a longer file is not a record.
    static let maxBytes = 256

    /// A record; `bytes` and `total` clamped to 0 when negative.
    public init(phase: ProgressEvent.Phase, bytes: Int64, total: Int64) {
        self.phase = phase.rawValue
        self.bytes = UInt64(clamping: bytes)
        self.total = UInt64(clamping: total)
    }

    /// The record of `app` in `root`.
    public static func path(root: String, app: String) -> String { "\(root)/apps/\(app)/\(fileName)" }

    /// The file's bytes.
    var encoded: [UInt8] { Array(#"{"phase":"\#(phase)","bytes":\#(bytes),"total":\#(total)}"#.utf8) + [0x0a] }

    /// A record from a file's bytes, or nil for anything that is not one: too long, not
    /// JSON, an unknown phase, numbers out of range, more bytes done than expected.
    static func parse(_ bytes: [UInt8]) -> ProgressRecord? {
        guard bytes.count <= maxBytes,
              let record = try? JSONDecoder().decode(ProgressRecord.self, from: Data(bytes)),
              ProgressEvent.Phase(rawValue: record.phase) != nil,
              record.total == 0 ? record.bytes == 0 : record.bytes <= record.total else { return nil }
        return record
    }

    /// Reads `path` as a record: a regular file (a link is not followed), at most
    /// `maxBytes` read; nil when there is none or it is not a record.
    static func read(_ path: String) -> ProgressRecord? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        var buffer = [UInt8](repeating: 0, count: maxBytes + 1)
        var count = 0
        while count < buffer.count {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            count += n
        }
        return parse(Array(buffer.prefix(count)))
    }
}
