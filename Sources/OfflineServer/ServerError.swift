/// The error type of the reference server (`offline-server`): a phase, a stable cause code,
/// a one-line reason, the path involved (when there is one) and the underlying cause.
///
/// The device's `OfflineAgentError` names `offline-agent serve` for its `serve` phase; this
/// server's failures are its own (its catalog, its collector, its injected faults).
public struct ServerError: Error, Sendable, CustomStringConvertible {
    /// The phase that failed. The tool exits 64 for `usage`, 1 otherwise.
    public enum Code: String, Sendable, Codable {
        /// Invalid arguments or configuration (`--auto-halt`, `--fault`, `--reports-db`).
        case usage
        /// Reading the publish directory it serves (`state.json`, manifests).
        case catalog
        /// The fleet report collector: its database and its secret.
        case reports
        /// A fault injected on purpose (`--fault`).
        case fault
    }

    /// Why it failed: a stable code, spelled as `docs/PROTOCOL.md`, "Error codes", does.
    public enum Cause: String, Sendable, Codable, CaseIterable {
        /// Invalid arguments or configuration.
        case usage
        /// A local file or database operation failed.
        case io
        /// An exchange (with the reports database) did not finish within its deadline.
        case timeout
        /// A connection was closed or reset.
        case network
        /// The publish directory's state is inconsistent.
        case stateInvalid = "state-invalid"
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
    ///   - cause: The stable code; the phase's default when nil.
    ///   - path: The file or URL concerned.
    ///   - underlying: The error that caused this one.
    public init(_ code: Code, _ reason: String, cause: Cause? = nil, path: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        let phaseDefault: Cause = switch code {
        case .usage: .usage
        case .catalog: .stateInvalid
        case .reports: .io
        case .fault: .network
        }
        self.cause = cause ?? phaseDefault
        self.reason = reason
        self.path = path
        self.underlying = underlying
    }

    /// The process exit status: 64 (`EX_USAGE`) for usage, 1 otherwise.
    public var exitStatus: Int32 { code == .usage ? 64 : 1 }

    /// `phase: reason (path): underlying`, one line.
    public var description: String {
        var text = "\(code.rawValue): \(reason)"
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}
