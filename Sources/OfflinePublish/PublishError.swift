import OfflineAgent

/// The error type of the publisher (`offline-publish`): a phase, a stable cause code, a
/// one-line reason, the path involved (when there is one) and the underlying cause.
///
/// Its phase and cause names are those of `docs/PROTOCOL.md`, "Error codes" (`publish`,
/// `usage`, `busy`; `disk-full`): the publisher's own failures, apart from the device's.
public struct PublishError: Error, Sendable, CustomStringConvertible {
    /// The phase that failed. The tool maps these to exit statuses (1, 64, 75).
    public enum Code: String, Sendable, Codable {
        /// Building, signing or writing packages, patches, metadata or state.
        case publish
        /// Invalid arguments, a key file or options the publish directory refuses.
        case usage
        /// Another verb holds the app's lock in the publish directory past `--lock-wait`.
        case busy
    }

    /// Why it failed: a stable code, finer than the phase, spelled as `docs/PROTOCOL.md` does.
    ///
    /// A struct rather than an enum so that a failure of the engine library the publisher
    /// calls keeps its own cause when wrapped (``init(_:)``).
    public struct Cause: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The wire spelling, e.g. `publish` or `disk-full`.
        public let rawValue: String
        /// A cause spelled `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// A publishing step failed.
        public static let publish = Cause(rawValue: "publish")
        /// Invalid arguments or configuration.
        public static let usage = Cause(rawValue: "usage")
        /// Another verb holds the app's lock.
        public static let busy = Cause(rawValue: "busy")
        /// A write hit ENOSPC/EDQUOT.
        public static let diskFull = Cause(rawValue: OfflineAgentError.Cause.diskFull.rawValue)
        public var description: String { rawValue }
    }

    /// The phase that failed.
    public let code: Code
    /// Why it failed, as a stable code.
    public let cause: Cause
    /// One line saying what went wrong, for people.
    public let reason: String
    /// The file or URL concerned, when there is one.
    public let path: String?
    /// The error that caused this one, when there is one.
    public let underlying: (any Error & Sendable)?

    /// An error of phase `code`.
    ///
    /// - Parameters:
    ///   - code: The phase that failed.
    ///   - reason: One line for people.
    ///   - cause: The stable code; the phase's own name when nil.
    ///   - path: The file or URL concerned.
    ///   - underlying: The error that caused this one.
    public init(_ code: Code, _ reason: String, cause: Cause? = nil, path: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.cause = cause ?? Cause(rawValue: code.rawValue)
        self.reason = reason
        self.path = path
        self.underlying = underlying
    }

    /// A failure of the engine library (reading a manifest, checking a tree with the device's
    /// rules, signing) met while publishing: usage and busy stay what they are, every other
    /// phase is the publisher's `publish`; the cause and the message are kept.
    public init(_ error: OfflineAgentError) {
        let code: Code = switch error.code {
        case .usage: .usage
        case .busy: .busy
        default: .publish
        }
        self.init(code, error.reason, cause: Cause(rawValue: error.cause.rawValue), path: error.path, underlying: error.underlying)
    }

    /// The process exit status: 75 (`EX_TEMPFAIL`) busy, 64 (`EX_USAGE`) usage, 1 otherwise.
    public var exitStatus: Int32 {
        switch code {
        case .busy: 75
        case .usage: 64
        case .publish: 1
        }
    }

    /// `phase: reason (path): underlying`, one line.
    public var description: String {
        var text = "\(code.rawValue): \(reason)"
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}
