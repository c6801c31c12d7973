import FoundationEssentials
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Loopback names and addresses, for the bind check and the `Host` header check
/// (DNS-rebinding defence: a page on `http://evil.example:PORT/` resolved to
/// 127.0.0.1 still sends `Host: evil.example:PORT`).
enum LocalHost {
    /// Whether a bare host (no port; IPv6 with or without brackets) is a loopback
    /// name or address: `localhost` and `*.localhost` (RFC 6761, never sent to DNS by
    /// browsers), `127.0.0.0/8`, `::1` and `::ffff:127.x.x.x`.
    static func isLoopback(host: some StringProtocol) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
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

    /// Whether a `Host` header value (`host`, `host:port`, `[v6]`, `[v6]:port`) names a
    /// loopback host. A missing or malformed value is not.
    static func isLoopback(authority: String?) -> Bool {
        guard let authority, !authority.isEmpty else { return false }
        let host: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return false }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || isPort(after) else { return false }
            // Brackets hold IPv6 only.
            guard host.contains(":") else { return false }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            guard isPort(authority[colon...]), !host.contains(":") else { return false }
        } else {
            host = authority[...]
        }
        return !host.isEmpty && isLoopback(host: host)
    }

    /// `:` followed by 1–5 digits.
    private static func isPort(_ text: Substring) -> Bool {
        guard text.first == ":" else { return false }
        let digits = text.dropFirst()
        return (1...5).contains(digits.count) && digits.utf8.allSatisfy { $0 >= 48 && $0 <= 57 }
    }

    /// `host` as it appears in a URL: IPv6 addresses in brackets.
    static func urlHost(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }
}
