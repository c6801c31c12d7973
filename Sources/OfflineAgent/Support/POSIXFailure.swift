#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An `errno` value with its message, usable as an underlying cause.
public struct POSIXFailure: Error, Sendable, CustomStringConvertible {
    /// The `errno` value.
    public let errno: Int32
    /// The call or step that failed, e.g. `open /path`.
    public let operation: String

    /// The failure of `operation` with `errno` (the current one by default).
    public init(_ operation: String, errno: Int32 = currentErrno) {
        self.operation = operation
        self.errno = errno
    }

    /// `operation: strerror(errno)`.
    public var description: String { "\(operation): \(String(cString: strerror(errno)))" }
}

/// `errno` under a name the initialiser's `errno` parameter doesn't shadow.
@usableFromInline var currentErrno: Int32 { errno }
