import FoundationEssentials

/// How a version arrived.
public enum UpdateMethod: String, Sendable, Codable {
    /// A bsdiff patch applied to the kept package of the previous version.
    case patch
    /// A full package zip.
    case full
}
