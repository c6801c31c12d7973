import CBspatch
import Foundation

/// Why the C applier (`CBspatch`) refused a patch: its status code and one-line reason.
///
/// Carried as the `underlying` cause of an `OfflineAgentError(.patch, ...)`, so callers
/// and tests can tell a hostile patch (`control`, `bounds`, ...) from a local I/O problem.
public struct PatchFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// A `cbspatch_status` value (see the constants below).
    public let status: Int32
    /// The C library's one-line reason, e.g. "ctrl length -5 is negative".
    public let message: String

    public init(status: Int32, message: String) {
        self.status = status
        self.message = message
    }

    /// The short name of `status` ("io", "magic", "header", ...).
    public var name: String {
        String(cString: cbspatch_status_name(cbspatch_status(rawValue: UInt32(bitPattern: status))))
    }

    /// Only the status: as an `underlying` cause the message is already the error's reason.
    public var description: String { "cbspatch status \(status) (\(name))" }

    /// open/read/write/fsync/rename failed.
    public static let io = code(CBSPATCH_ERR_IO)
    /// Not a BSDIFF40 patch.
    public static let magic = code(CBSPATCH_ERR_MAGIC)
    /// Truncated header, negative or overflowing lengths, streams past the end of the file.
    public static let header = code(CBSPATCH_ERR_HEADER)
    /// The header's new size is not the expected size.
    public static let sizeMismatch = code(CBSPATCH_ERR_SIZE_MISMATCH)
    /// A bzip2 stream is corrupt or cut short.
    public static let bzip2 = code(CBSPATCH_ERR_BZIP2)
    /// A control triple is negative or overflows, or a stream holds more than the triples use.
    public static let control = code(CBSPATCH_ERR_CONTROL)
    /// A write past the new size, or a read outside old.
    public static let bounds = code(CBSPATCH_ERR_BOUNDS)
    /// Too many consecutive control triples producing no output.
    public static let stall = code(CBSPATCH_ERR_STALL)
    /// A stream ended before the new size was reached.
    public static let truncated = code(CBSPATCH_ERR_TRUNCATED)
    /// Out of memory (or threads).
    public static let noMemory = code(CBSPATCH_ERR_NOMEM)
    /// An empty path or a negative expected size.
    public static let argument = code(CBSPATCH_ERR_ARGUMENT)

    private static func code(_ status: cbspatch_status) -> Int32 { Int32(bitPattern: status.rawValue) }
}

/// Applies BSDIFF40 (bsdiff 4.3) patches with the hardened C applier in `CBspatch`:
/// bounded memory, every hostile input refused with a reason, and the output
/// written to a temporary file that is renamed into place only on success.
public enum Patcher {
    /// Applies a BSDIFF40 patch to `old`, producing `new`.
    ///
    /// `new` is replaced atomically (temporary file in its directory, fsync, rename) and is
    /// left untouched on failure; `old` may be the same file as `new`.
    /// - Parameters:
    ///   - expectedSize: when given, the patch is refused unless its header says it
    ///     produces exactly this many bytes (checked before any work is done).
    ///   - durable: fsync `new` before the rename. Without it the rename is still atomic,
    ///     but a power loss may leave a short file: for tools, like `bspatch`, not installs.
    /// - Throws: `OfflineAgentError(.patch, reason, path: patch, underlying: PatchFailure)`.
    public static func apply(old: URL, patch: URL, to new: URL, expectedSize: Int64? = nil, durable: Bool = true) throws {
        if let expectedSize, expectedSize < 0 {
            throw failure(PatchFailure(status: PatchFailure.argument, message: "expected size \(expectedSize) is negative"),
                          patch: patch)
        }
        var error = cbspatch_error()
        let status = old.withUnsafeFileSystemRepresentation { oldPath in
            patch.withUnsafeFileSystemRepresentation { patchPath in
                new.withUnsafeFileSystemRepresentation { newPath in
                    cbspatch_apply_flags(oldPath, patchPath, newPath, expectedSize ?? -1, durable ? 0 : CBSPATCH_NO_SYNC, &error)
                }
            }
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
    }

    /// Reads and validates the 32-byte header of a BSDIFF40 patch, without decoding anything.
    /// - Throws: `OfflineAgentError(.patch, ...)` with a `PatchFailure` for a missing file,
    ///   a bad magic, negative lengths or streams running past the end of the file.
    public static func header(of patch: URL) throws -> (controlLength: Int64, diffLength: Int64, newSize: Int64) {
        var error = cbspatch_error()
        var control: Int64 = 0, diff: Int64 = 0, size: Int64 = 0
        let status = patch.withUnsafeFileSystemRepresentation { path in
            cbspatch_read_header(path, &control, &diff, &size, &error)
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
        return (control, diff, size)
    }

    private static func failure(_ status: cbspatch_status, _ error: cbspatch_error, patch: URL) -> OfflineAgentError {
        // The C side always NUL-terminates, but never trust a fixed buffer to be.
        let message = withUnsafeBytes(of: error.message) { raw -> String in
            let bytes = raw.prefix { $0 != 0 }
            return String(decoding: bytes, as: UTF8.self)
        }
        return failure(PatchFailure(status: Int32(bitPattern: status.rawValue), message: message), patch: patch)
    }

    private static func failure(_ cause: PatchFailure, patch: URL) -> OfflineAgentError {
        // A local I/O failure is not the patch's fault; everything else the C side refuses is.
        OfflineAgentError(.patch, cause.message.isEmpty ? "patch refused (\(cause.name))" : cause.message,
                          cause: cause.status == PatchFailure.io ? .io : .patchInvalid, path: patch.path, underlying: cause)
    }
}
