import Foundation

/// An `errno` value with its message, usable as an underlying cause.
public struct POSIXFailure: Error, Sendable, CustomStringConvertible {
    public let errno: Int32
    public let operation: String

    public init(_ operation: String, errno: Int32 = Foundation.errno) {
        self.operation = operation
        self.errno = errno
    }

    public var description: String { "\(operation): \(String(cString: strerror(errno)))" }
}
