import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The parts of a request URL that cookie rules look at.
struct CookieURL {
    /// Lower-case, brackets of an IPv6 address removed.
    var host: String
    /// Percent-encoded, `/` when empty.
    var path: String
    var isSecure: Bool

    init?(_ url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
              let scheme = WebAddress.webScheme(components.scheme),
              let encodedHost = components.percentEncodedHost?.lowercased(), !encodedHost.isEmpty else { return nil }
        var host = WebAddress.unbracketed(encodedHost)
        if host.hasSuffix(".") { host.removeLast() }
        self.host = host
        self.path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        self.isSecure = scheme == "https"
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
