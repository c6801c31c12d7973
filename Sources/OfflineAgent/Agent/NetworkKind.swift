import FoundationEssentials

/// The kind of network the device is on, for `networkType: wifi` manifests.
public enum NetworkKind: String, Sendable, Codable {
    /// Pay-per-byte (cellular): manifests with `networkType` `wifi` are deferred.
    case metered
    /// Any download may proceed.
    case unmetered
}
