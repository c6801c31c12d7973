import CommandSupport
import OfflinePublish

// offline-server runs release verbs (auto-halt) and reads state.json through the publisher.
extension PublishError: CommandFailure {
    /// `phase: reason (path): underlying`.
    public var messageLine: String { description }
}
