/// The version of this agent, sent as `User-Agent: offline-agent/<version>`.
public enum AgentVersion {
    public static let current = "0.1.0"
    public static var userAgent: String { "offline-agent/\(current)" }
}
