import FoundationEssentials

/// One HTTP cookie as RFC 6265 §5.3 stores it.
public struct Cookie: Sendable, Equatable, Codable {
    /// The `SameSite` attribute (RFC 6265bis). The agent's own requests are all
    /// same-site top-level requests, so it is kept and shown but never withholds a cookie.
    public enum SameSite: String, Sendable, Codable, CaseIterable {
        case strict = "Strict", lax = "Lax", none = "None"
    }

    /// The cookie's name.
    public var name: String
    /// The cookie's value, as the server sent it.
    public var value: String
    /// Lower-case host name or address, without a leading dot.
    public var domain: String
    /// Sent only to `domain` itself (no `Domain` attribute), not to its subdomains.
    public var hostOnly: Bool
    /// Sent only to request paths at or below this one.
    public var path: String
    /// When the cookie stops being sent; nil for a session cookie, which lives only as
    /// long as the process and is never written to disk.
    public var expires: Date?
    /// Sent only over https.
    public var secure: Bool
    /// Kept from `HttpOnly`; the agent has no scripts to withhold it from.
    public var httpOnly: Bool
    /// The `SameSite` attribute, when the server sent one.
    public var sameSite: SameSite?
    /// When the cookie was first stored (kept when it is replaced).
    public var created: Date

    /// A cookie with every attribute given; host-only, path `/`, session by default.
    public init(
        name: String, value: String, domain: String, hostOnly: Bool = true, path: String = "/", expires: Date? = nil,
        secure: Bool = false, httpOnly: Bool = false, sameSite: SameSite? = nil, created: Date = Date()
    ) {
        self.name = name
        self.value = value
        self.domain = domain
        self.hostOnly = hostOnly
        self.path = path
        self.expires = expires
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.created = created
    }

    /// Persistent cookies (`Expires` or `Max-Age`) survive the process.
    public var isPersistent: Bool { expires != nil }

    /// Whether the cookie has expired at `now` (a session cookie never does).
    public func isExpired(at now: Date) -> Bool { expires.map { $0 <= now } ?? false }

    /// Whether a request to `request` carries this cookie (RFC 6265 §5.4 step 1).
    func matches(_ request: CookieURL) -> Bool {
        if secure, !request.isSecure { return false }
        let hostMatches = hostOnly ? request.host == domain : Self.domainMatches(request.host, domain)
        return hostMatches && Self.pathMatches(request.path, path)
    }

    /// No control character but a tab (RFC 6265bis §5.6): what a name or value may hold,
    /// whether it comes from a `Set-Cookie` header or from the jar's file.
    static func isAllowedText(_ text: String) -> Bool {
        !text.utf8.contains { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }
    }

    /// The same cookie for the store's purposes: a newer one replaces it (§5.3 step 11).
    func replaces(_ other: Cookie) -> Bool {
        name == other.name && domain == other.domain && path == other.path
    }

    // MARK: - Matching rules (RFC 6265 §5.1.3, §5.1.4)

    /// `host` is `domain` or a subdomain of it; never a partial label, never an IP address.
    static func domainMatches(_ host: String, _ domain: String) -> Bool {
        if host == domain { return true }
        guard host.hasSuffix(domain), !CookieURL.isIPAddress(host) else { return false }
        return host.utf8.dropLast(domain.utf8.count).last == UInt8(ascii: ".")
    }

    static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return requestPath.utf8.count == cookiePath.utf8.count || cookiePath.hasSuffix("/")
            || requestPath.utf8.dropFirst(cookiePath.utf8.count).first == UInt8(ascii: "/")
    }

    /// The directory of the request path: where a cookie without `Path` applies.
    static func defaultPath(_ requestPath: String) -> String {
        guard requestPath.hasPrefix("/"), let lastSlash = requestPath.lastIndex(of: "/"), lastSlash != requestPath.startIndex else {
            return "/"
        }
        return String(requestPath[..<lastSlash])
    }
}
