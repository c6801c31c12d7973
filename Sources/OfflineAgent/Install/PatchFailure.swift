import CBspatch
import FoundationEssentials

/// Why the C applier (`CBspatch`) refused a patch: its status code and one-line reason.
///
/// Carried as the `underlying` cause of an `OfflineAgentError(.patch, ...)`, so callers
/// and tests can tell a hostile patch (`control`, `bounds`, ...) from a local I/O problem.
public struct PatchFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// A `cbspatch_status` value (see the constants below).
    public let status: Int32
    /// The C library's one-line reason, e.g. "ctrl length -5 is negative".
    public let message: String

    /// A failure with the C applier's status and reason.
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
    /// The caller's writer stopped the apply (a streamed package that is not a plain stored zip).
    public static let stopped = code(CBSPATCH_ERR_STOPPED)

    private static func code(_ status: cbspatch_status) -> Int32 { Int32(bitPattern: status.rawValue) }
}
