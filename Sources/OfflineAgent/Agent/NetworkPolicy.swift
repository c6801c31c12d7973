import FoundationEssentials

/// How the device's network kind is decided: read from the system, or given.
public enum NetworkPolicy: String, Sendable, Codable, CaseIterable {
    /// Ask NetworkManager whether the current connection is metered
    /// (`MeteredNetwork.detect`); unmetered when it cannot be read.
    case auto
    /// Pay-per-byte: manifests with `networkType` `wifi` are deferred.
    case metered
    /// Any download may proceed.
    case unmetered

    /// The given kind, or nil for `auto`.
    public var fixed: NetworkKind? {
        switch self {
        case .auto: nil
        case .metered: .metered
        case .unmetered: .unmetered
        }
    }
}
