import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The parts of a URL the whitelist compares: scheme, host, effective port, raw path.
package struct ParsedURL: Equatable, Sendable {
    package var scheme: String
    package var host: String
    package var port: Int
    /// Percent-encoded path.
    package var path: String

    /// The URL on `origin` with the percent-encoded `path` (`/` when empty).
    package init(origin: MirrorOrigin, path: String) {
        scheme = origin.scheme
        host = origin.host
        port = origin.port
        self.path = path.isEmpty ? "/" : path
    }

    package init?(_ url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return nil }
        self.init(components)
    }

    package init?(string: String) {
        guard let components = URLComponents(string: string) else { return nil }
        self.init(components)
    }

    private init?(_ components: URLComponents) {
        guard let scheme = WebAddress.webScheme(components.scheme),
              let host = components.host?.lowercased(), !host.isEmpty else { return nil }
        self.scheme = scheme
        self.host = host
        self.port = components.port ?? WebAddress.defaultPort(scheme: scheme)
        self.path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
    }

    /// The rest of this URL's path after `prefix`, when `prefix` matches at a `/` boundary.
    package func rest(after prefix: ParsedURL) -> String? {
        guard scheme == prefix.scheme, host == prefix.host, port == prefix.port else { return nil }
        if prefix.path.hasSuffix("/") {
            guard path.hasPrefix(prefix.path) else { return nil }
            return String(path.dropFirst(prefix.path.count))
        }
        if path == prefix.path { return "" }
        guard path.hasPrefix(prefix.path + "/") else { return nil }
        return String(path.dropFirst(prefix.path.count + 1))
    }
}
