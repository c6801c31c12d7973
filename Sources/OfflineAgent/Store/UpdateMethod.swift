import FoundationEssentials

/// How a version arrived.
public enum UpdateMethod: String, Sendable, Codable {
    case patch, full
}
