import FoundationEssentials
import NIOCore
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Loopback names and addresses, for the bind check and the `Host` header check
/// (DNS-rebinding defence: a page on `http://evil.example:PORT/` resolved to
/// 127.0.0.1 still sends `Host: evil.example:PORT`).
enum LocalHost {
    /// Whether a connection's peer is on this machine's loopback (`127.0.0.0/8`, `::1`,
    /// `::ffff:127.x.x.x`, a Unix socket): the socket's own address, which no header can
    /// change. Nil (unknown) is not loopback.
    static func isLoopback(peer: SocketAddress?) -> Bool {
        switch peer {
        case .unixDomainSocket: return true
        case .v4, .v6: return peer?.ipAddress.map { isLoopback(host: $0) } ?? false
        case nil: return false
        }
    }

    /// Whether a bare host (no port; IPv6 with or without brackets) is a loopback
    /// name or address: `localhost` and `*.localhost` (RFC 6761, never sent to DNS by
    /// browsers), `127.0.0.0/8`, `::1` and `::ffff:127.x.x.x`.
    static func isLoopback(host: some StringProtocol) -> Bool {
        var name = WebAddress.unbracketed(host.lowercased())
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, name, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
            // IPv4-mapped loopback.
            return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
        }
        return false
    }
}
