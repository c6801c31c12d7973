import OfflineAgent

/// What a `Host` value says before any mirror is looked up (`LocalRouter`).
struct LocalHostAuthority: Sendable {
    /// The `Host` value (the request's authority); nil when the request had none.
    let value: String?
    /// The host, without the port; nil for a missing or malformed value.
    let host: Substring?
    /// A name under `.localhost` other than `localhost` itself, lowercased and without a
    /// trailing dot: a mirror host or nothing (`LocalRouter.mirrorName`).
    let mirrorName: String?
    /// Whether `host` is a loopback name or address (`LocalHost.isLoopback(host:)`).
    let isLoopback: Bool
    /// The port the client reached this server on (80 when the value names none).
    let port: Int

    init(_ value: String?) {
        self.value = value
        let parts = value.flatMap { WebAddress.split(authority: $0) }
        host = parts?.host
        mirrorName = parts.flatMap { LocalRouter.mirrorName($0.host) }
        isLoopback = parts.map { LocalHost.isLoopback(host: $0.host) } ?? false
        port = parts?.port ?? 80
    }
}
