import NIOCore
import NIOSSL
import OfflineAgent

/// TLS to `https` origins, for every connection `serve` opens to one (forwarded requests
/// and WebSockets): the system's trust roots, and SNI naming the origin's host.
enum OriginTLS {
    /// Adds the TLS client handler to a new connection's pipeline when `origin` is `https`.
    static func addHandler(for origin: MirrorOrigin, to channel: any Channel) throws {
        guard origin.scheme == "https" else { return }
        let host = WebAddress.unbracketed(origin.host)
        // No SNI for an address literal (RFC 6066 §3).
        let literal = host.contains(":") || host.split(separator: ".").allSatisfy { UInt8($0) != nil }
        let handler = try NIOSSLClientHandler(context: shared.get(), serverHostname: literal ? nil : host)
        try channel.pipeline.syncOperations.addHandler(handler)
    }

    /// One context for the process, made on first use.
    private static let shared = Result { try NIOSSLContext(configuration: .makeClientConfiguration()) }
}
