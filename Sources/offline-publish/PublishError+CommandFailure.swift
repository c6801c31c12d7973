import CommandSupport
import OfflinePublish

extension PublishError: CommandFailure {
    /// `phase: reason (path): underlying`.
    public var messageLine: String { description }
}
