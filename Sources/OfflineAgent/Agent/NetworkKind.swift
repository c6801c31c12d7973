import FoundationEssentials

/// The kind of network the device is on, for `networkType: wifi` manifests.
public enum NetworkKind: String, Sendable, Codable {
    case metered, unmetered
}
