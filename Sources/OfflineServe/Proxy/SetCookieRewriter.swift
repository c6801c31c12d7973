import OfflineAgent
import OfflineHTTP

/// Makes a cookie the origin sets hold on the mirror the page is on
/// (`docs/PROTOCOL.md`, "Mirrored origins", "Forwarding").
///
/// Only the `Domain` attribute changes, and it is never widened:
/// - a `Domain` the origin's host domain-matches (its own host or a parent, e.g.
///   `.example.com` for `h5.example.com`) that is not a public suffix (`PublicSuffixList`,
///   the list the cookie jar reads) becomes the same name under `.localhost` for an https
///   origin on port 443, whose sibling origins' mirrors (`api.example.com.localhost`) then
///   share the cookie as the real hosts do; for any other scheme or port the mirror host
///   carries a `<scheme>-<port>` label after the name, so the attribute is dropped and
///   the cookie becomes host-only;
/// - any other `Domain` (a public suffix such as `com`, or a name the origin's host does
///   not match) is dropped: the cookie is host-only on the mirror, never one a browser
///   would send to every `*.com.localhost` mirror.
///
/// `Secure`, `SameSite` and the `__Secure-` / `__Host-` prefixes are kept: Chromium
/// (checked with 156) treats `http://*.localhost` as a secure context and keeps such
/// cookies on it, so a login made through the mirror survives a reload.
enum SetCookieRewriter {
    static func rewrite(_ value: String, origin: MirrorOrigin, suffixes: PublicSuffixList = .system) -> String {
        // On the byte `;` and `=`, as the browser parses it (`split(onByte:)`).
        var parts = value.split(onByte: UInt8(ascii: ";")).map(String.init)
        guard parts.count > 1 else { return value }
        var changed = false
        var index = 1
        while index < parts.count {
            let attribute = Substring(parts[index].trimmingWhitespace())
            guard let equals = attribute.firstIndex(ofByte: UInt8(ascii: "=")),
                  attribute[..<equals].trimmingWhitespace().lowercased() == "domain" else {
                index += 1
                continue
            }
            var domain = attribute[attribute.index(after: equals)...].trimmingWhitespace().lowercased()
            if domain.hasPrefix(".") { domain.removeFirst() }
            changed = true
            let matches = !domain.isEmpty && (origin.host == domain || origin.host.hasSuffix("." + domain))
            if matches, !suffixes.isPublicSuffix(domain), origin.scheme == "https", origin.port == 443 {
                parts[index] = " Domain=\(domain).\(MirrorOrigin.suffix)"
                index += 1
            } else {
                parts.remove(at: index)
            }
        }
        // A removed last attribute leaves the one before it with its trailing space.
        return changed ? String(parts.joined(separator: ";").trimmingWhitespace()) : value
    }
}
