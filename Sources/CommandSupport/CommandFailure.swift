/// A failure a command-line tool reports as one line on stderr and an exit status.
///
/// Each product has its own error type (`OfflineAgentError` on the device, `PublishError`
/// for `offline-publish`, `ServerError` for `offline-server`); the tools conform them to this
/// so that one ``reportingFailures(tool:_:)`` prints and exits the same way for all three.
public protocol CommandFailure: Error {
    /// The process exit status: 1 failed, 64 (`EX_USAGE`) usage, 75 (`EX_TEMPFAIL`) busy.
    var exitStatus: Int32 { get }
    /// One line for people, without the tool's name (`phase: reason (path): underlying`).
    var messageLine: String { get }
}
