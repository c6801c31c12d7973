import OfflineAgent
/// Which timeout of `offline-agent serve` closed a connection (see `LocalServer.Configuration`).
public enum LocalConnectionTimeout: String, Sendable, CaseIterable {
    /// A request head did not arrive in time (a half-sent or trickled request).
    case header
    /// Nothing moved for too long: a keep-alive connection with no request, or a
    /// response the client stopped reading.
    case idle
}
