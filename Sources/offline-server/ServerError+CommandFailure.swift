import CommandSupport
import OfflineServer

extension ServerError: CommandFailure {
    /// `phase: reason (path): underlying`.
    public var messageLine: String { description }
}
