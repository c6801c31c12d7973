import OfflineAgent

/// The signing keys a publisher holds for the top-level roles and for delegated ones.
/// The simple path is one key for every top-level role (`publish --key K`); a team that
/// splits roles gives only the keys its step needs (`timestamp --key T` holds the
/// timestamp key alone; an app's team holds its delegated role's key, `delegate`).
public struct TUFKeys: Sendable {
    public var root: [SigningKey]
    public var targets: [SigningKey]
    public var snapshot: [SigningKey]
    public var timestamp: [SigningKey]
    /// Delegated role name (the app's name) → its keys.
    public var delegated: [String: [SigningKey]]

    public init(
        root: [SigningKey] = [], targets: [SigningKey] = [], snapshot: [SigningKey] = [], timestamp: [SigningKey] = [],
        delegated: [String: [SigningKey]] = [:]
    ) {
        self.root = root
        self.targets = targets
        self.snapshot = snapshot
        self.timestamp = timestamp
        self.delegated = delegated
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
        case "timestamp": timestamp
        default: delegated[role] ?? []
        }
    }
}
