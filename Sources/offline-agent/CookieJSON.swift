import ArgumentParser
import FoundationEssentials
import OfflineAgent

/// A cookie as `cookies` shows it: everything but the value, which is masked.
struct CookieJSON: Encodable {
    var name: String
    var value: String
    var domain: String
    var hostOnly: Bool
    var path: String
    var expires: String?
    var secure: Bool
    var httpOnly: Bool
    var sameSite: String?

    init(_ cookie: Cookie) {
        name = cookie.name
        // Cookies are credentials: show that a value is there, and its size, never the value.
        value = "\(String(repeating: "*", count: min(cookie.value.utf8.count, 8))) (\(cookie.value.utf8.count) bytes)"
        domain = cookie.domain
        hostOnly = cookie.hostOnly
        path = cookie.path
        expires = cookie.expires.map(RFC3339.string(from:))
        secure = cookie.secure
        httpOnly = cookie.httpOnly
        sameSite = cookie.sameSite?.rawValue
    }

    var line: String {
        var flags = [hostOnly ? "host-only" : "subdomains"]
        if secure { flags.append("secure") }
        if httpOnly { flags.append("httponly") }
        if let sameSite { flags.append("samesite=\(sameSite)") }
        return "\(domain)\(path) \(name)=\(value) expires \(expires ?? "at exit") [\(flags.joined(separator: ", "))]"
    }
}
