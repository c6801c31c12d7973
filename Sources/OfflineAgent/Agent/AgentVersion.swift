/// The version of this agent, sent as `User-Agent: offline-agent/<version>`.
public enum AgentVersion {
    /// This release's version (semantic versioning; also the git tag).
    public static let current = "0.1.0"
    /// The `User-Agent` header value every request carries.
    public static var userAgent: String { "offline-agent/\(current)" }
}
