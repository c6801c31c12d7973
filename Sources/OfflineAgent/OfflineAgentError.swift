import Foundation

/// The one error type of the engine: a phase code, a one-line reason, the path
/// involved (when there is one) and the underlying cause.
public struct OfflineAgentError: Error, Sendable, CustomStringConvertible {
    /// The phase that failed. The CLI maps these to exit statuses.
    public enum Code: String, Sendable, Codable {
        /// Fetching or validating the manifest (HTTP, JSON, signature, version rules).
        case manifest
        /// Downloading a package or patch (HTTP, size, hash, disk space).
        case download
        /// Applying a BSDIFF40 patch.
        case patch
        /// Extracting a package archive.
        case extract
        /// Installing, activating, rolling back or reading local state.
        case install
        /// Another process holds the root's lock.
        case busy
        /// Invalid arguments or configuration given by the caller.
        case usage
        /// Building or publishing packages.
        case publish
    }

    public let code: Code
    /// One line saying what went wrong, for people.
    public let reason: String
    /// The file or URL concerned, when there is one.
    public let path: String?
    /// The error that caused this one, when there is one.
    public let underlying: (any Error & Sendable)?

    public init(_ code: Code, _ reason: String, path: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.reason = reason
        self.path = path
        self.underlying = underlying
    }

    public var description: String {
        var text = "\(code.rawValue): \(reason)"
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }

    /// The process exit status the CLI uses for this error: 75 when busy, 64 for usage, 1 otherwise.
    public var exitStatus: Int32 {
        switch code {
        case .busy: 75
        case .usage: 64
        default: 1
        }
    }
}

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
