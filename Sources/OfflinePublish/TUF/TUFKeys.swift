import OfflineAgent

/// The signing keys a publisher holds for the top-level roles. The simple path is one
/// key for every role (`publish --key K`); a team that splits roles gives only the
/// keys its step needs (`timestamp --key T` holds the timestamp key alone).
public struct TUFKeys: Sendable {
    public var root: [SigningKey]
    public var targets: [SigningKey]
    public var snapshot: [SigningKey]
    public var timestamp: [SigningKey]

    public init(root: [SigningKey] = [], targets: [SigningKey] = [], snapshot: [SigningKey] = [], timestamp: [SigningKey] = []) {
        self.root = root
        self.targets = targets
        self.snapshot = snapshot
        self.timestamp = timestamp
    }

    /// One key holding every role, threshold 1: what `keygen` + `publish --key K` gives.
    public init(all key: SigningKey) {
        self.init(root: [key], targets: [key], snapshot: [key], timestamp: [key])
    }

    func keys(_ role: String) -> [SigningKey] {
        switch role {
        case "root": root
        case "targets": targets
        case "snapshot": snapshot
        default: timestamp
        }
    }
}
