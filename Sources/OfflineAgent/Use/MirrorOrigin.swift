import FoundationEssentials

/// A web origin (scheme, host, port) and the loopback virtual host that stands for it
/// in `serve` (`docs/PROTOCOL.md`, "Mirrored origins").
///
/// The mirror host is the origin's host under `.localhost`, which browsers, curl and
/// RFC 6761 resolve to loopback without DNS. The scheme and port are written only when
/// they are not `https` and 443, as one extra label `<scheme>-<port>`; origins whose
/// host ends in a label starting `http-` or `https-` (no top-level domain does) are not
/// mirrored, so the label is never ambiguous:
///
/// | origin | mirror host |
/// |---|---|
/// | `https://h5.example.com` | `h5.example.com.localhost` |
/// | `http://h5.example.com` | `h5.example.com.http-80.localhost` |
/// | `https://h5.example.com:8443` | `h5.example.com.https-8443.localhost` |
/// | `http://127.0.0.1:8080` | `127.0.0.1.http-8080.localhost` |
///
/// The mapping is a bijection between the origins it accepts and their mirror hosts:
/// ``init(mirrorHost:)`` accepts only the canonical spelling ``mirrorHost`` produces.
/// Not mirrored: IPv6 literals, non-ASCII hosts (write them in punycode), hosts whose
/// last label looks like the scheme label, and names over DNS's 253 bytes.
public struct MirrorOrigin: Sendable, Hashable, CustomStringConvertible {
    /// `http` or `https`.
    public let scheme: String
    /// Lowercased, no trailing dot.
    public let host: String
    /// The effective port (the scheme's default when the URL names none).
    public let port: Int
    /// `scheme://host[:port]`, the port only when it is not the scheme's default: the
    /// canonical spelling, so it alone decides equality. Made once, as the proxy names
    /// the origin in every forward's metrics and `Host`.
    public let origin: String

    /// The top-level label of every mirror host.
    public static let suffix = "localhost"

    /// The origin of an absolute `http` or `https` URL, or nil when it cannot be mirrored.
    public init?(url: URL) {
        guard let scheme = WebAddress.webScheme(url.scheme), let host = url.host else { return nil }
        self.init(scheme: scheme, host: host, port: url.port ?? WebAddress.defaultPort(scheme: scheme))
    }

    /// The origin of `scheme://host:port`, or nil when it cannot be mirrored.
    public init?(scheme: String, host: String, port: Int) {
        guard let scheme = WebAddress.webScheme(scheme), (1...65535).contains(port) else { return nil }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.isEmpty, labels.allSatisfy(Self.isHostLabel), !Self.isReservedLabel(labels.last!) else { return nil }
        self.scheme = scheme
        self.host = name
        self.port = port
        origin = port == WebAddress.defaultPort(scheme: scheme) ? "\(scheme)://\(name)" : "\(scheme)://\(name):\(port)"
        guard mirrorHost.utf8.count <= 253 else { return nil }
    }

    /// The origin a mirror host (a `Host` header's host, without the port) stands for;
    /// nil for any name that is not a canonical mirror host (`localhost` itself included).
    public init?(mirrorHost: some StringProtocol) {
        var name = mirrorHost.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        guard name.hasSuffix("." + Self.suffix) else { return nil }
        var labels = name.dropLast(Self.suffix.count + 1).split(separator: ".", omittingEmptySubsequences: false)
        var scheme = "https", port = 443
        if let last = labels.last, let (s, p) = Self.schemeLabel(last) {
            // The canonical spelling of https:443 has no scheme label.
            guard !(s == "https" && p == 443) else { return nil }
            (scheme, port) = (s, p)
            labels.removeLast()
        }
        guard !labels.isEmpty else { return nil }
        self.init(scheme: scheme, host: labels.joined(separator: "."), port: port)
        guard self.mirrorHost == name else { return nil }
    }

    /// The loopback name that stands for this origin, e.g. `h5.example.com.localhost`.
    public var mirrorHost: String {
        scheme == "https" && port == 443
            ? "\(host).\(Self.suffix)"
            : "\(host).\(scheme)-\(port).\(Self.suffix)"
    }

    /// `host[:port]` as `origin` writes it: the `Host` a request to the origin carries.
    public var authority: Substring { origin.dropFirst(scheme.utf8.count + 3) }

    /// Equal when the normalised origins are.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.origin == rhs.origin }

    /// Hashes the normalised origin.
    public func hash(into hasher: inout Hasher) { hasher.combine(origin) }

    /// `http://<mirror host>:<port>`: where `serve`, listening on `port`, answers for this origin.
    public func mirrorBase(servePort: Int) -> String {
        "http://\(mirrorHost):\(servePort)"
    }

    /// `url` (on this origin) moved to the mirror: same path, query and fragment.
    /// Nil when `url` is on another origin.
    public func mirrorURL(for url: URL, servePort: Int) -> String? {
        guard MirrorOrigin(url: url) == self,
              let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return nil }
        var result = mirrorBase(servePort: servePort)
        result += components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { result += "?" + query }
        if let fragment = components.percentEncodedFragment { result += "#" + fragment }
        return result
    }

    /// The normalised origin, `scheme://host[:port]`.
    public var description: String { origin }

    /// A DNS-style label: 1 to 63 bytes of ASCII letters, digits, `-` and `_` (which
    /// browsers accept in host names).
    private static func isHostLabel(_ label: Substring) -> Bool {
        (1...63).contains(label.utf8.count) && label.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// Whether a host's last label starts like a scheme label (`http-`, `https-`): such
    /// names are kept for the scheme label, so no origin's mirror host reads as another's.
    private static func isReservedLabel(_ label: Substring) -> Bool {
        label.hasPrefix("http-") || label.hasPrefix("https-")
    }

    /// `http-<port>` or `https-<port>` (port 1–65535, no leading zero) as scheme and port.
    private static func schemeLabel(_ label: Substring) -> (String, Int)? {
        guard let dash = label.firstIndex(of: "-") else { return nil }
        let scheme = String(label[..<dash]), digits = label[label.index(after: dash)...]
        guard scheme == "http" || scheme == "https", (1...5).contains(digits.utf8.count), digits.first != "0",
              digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let port = Int(digits), (1...65535).contains(port) else { return nil }
        return (scheme, port)
    }
}
