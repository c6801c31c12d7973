import FoundationEssentials

/// A `Set-Cookie` header read by the algorithm of RFC 6265 §5.2 and turned into a
/// cookie by the storage model of §5.3 (with RFC 6265bis's limits and its rule that
/// only https may set a `Secure` cookie).
enum SetCookie {
    /// Longest `name=value` accepted (RFC 6265bis §5.6 step 4).
    static let maxNameValueBytes = 4096
    /// Longest attribute value honoured; longer ones are ignored (RFC 6265bis §5.6).
    static let maxAttributeBytes = 1024
    /// Latest expiry accepted from a server: 400 days ahead (RFC 6265bis §5.6.1).
    static let maxLifetime: TimeInterval = 400 * 86_400

    /// The cookie `header` sets when it arrives in the response to `url`, or nil when
    /// the header must be ignored entirely.
    static func parse(_ header: String, from url: URL, now: Date, suffixes: PublicSuffixList = .system) -> Cookie? {
        guard let request = CookieURL(url) else { return nil }
        // On the byte `;` and `=`, as browsers parse it (`split(onByte:)`).
        let parts = header.split(onByte: UInt8(ascii: ";"))
        let pair = parts[0]
        guard let equals = pair.firstIndex(ofByte: UInt8(ascii: "=")) else { return nil }
        let name = trim(pair[..<equals]), value = trim(pair[pair.index(after: equals)...])
        guard !name.isEmpty, name.utf8.count + value.utf8.count <= maxNameValueBytes,
              Cookie.isAllowedText(name), Cookie.isAllowedText(value) else { return nil }

        var expires: Date?, maxAge: Date?, domain: String?, path: String?
        var secure = false, httpOnly = false, sameSite: Cookie.SameSite?
        // The last occurrence of an attribute wins (§5.3 step 3, "last attribute").
        for attribute in parts.dropFirst() {
            let key: String, raw: Substring
            if let eq = attribute.firstIndex(ofByte: UInt8(ascii: "=")) {
                key = trim(attribute[..<eq]).lowercased()
                raw = attribute[attribute.index(after: eq)...]
            } else {
                key = trim(attribute).lowercased()
                raw = ""
            }
            let attributeValue = trim(raw)
            guard attributeValue.utf8.count <= maxAttributeBytes else { continue }
            switch key {
            case "expires":
                if let date = CookieDate.parse(attributeValue) { expires = date }
            case "max-age":
                if let seconds = maxAgeSeconds(attributeValue) {
                    maxAge = seconds <= 0 ? .distantPast : now.addingTimeInterval(TimeInterval(seconds))
                }
            case "domain":
                guard !attributeValue.isEmpty else { continue }
                var text = attributeValue.lowercased()
                if text.hasPrefix(".") { text.removeFirst() }
                domain = text
            case "path":
                path = attributeValue.hasPrefix("/") ? attributeValue : nil
            case "secure": secure = true
            case "httponly": httpOnly = true
            case "samesite": sameSite = Cookie.SameSite.allCases.first { $0.rawValue.lowercased() == attributeValue.lowercased() }
            default: continue
            }
        }

        // Only a secure origin may set a Secure cookie (RFC 6265bis §5.7 step 15).
        if secure, !request.isSecure { return nil }
        var hostOnly = true
        if let domain, !domain.isEmpty {
            if suffixes.isPublicSuffix(domain) {
                // No cookie for a whole `co.uk` (§5.3 step 5); naming the host itself
                // (`localhost`) makes a host-only cookie.
                guard domain == request.host else { return nil }
            } else {
                guard Cookie.domainMatches(request.host, domain) else { return nil }
                hostOnly = false
            }
        }
        return Cookie(
            name: name, value: value, domain: hostOnly ? request.host : domain!, hostOnly: hostOnly,
            path: path ?? Cookie.defaultPath(request.path),
            // Max-Age wins over Expires (§5.3 step 3).
            expires: (maxAge ?? expires).map { min($0, now.addingTimeInterval(maxLifetime)) }, secure: secure, httpOnly: httpOnly, sameSite: sameSite, created: now)
    }

    /// RFC 6265 §5.2.2: an optional `-` and digits only; anything else is ignored.
    private static func maxAgeSeconds(_ text: String) -> Int64? {
        var digits = Substring(text)
        let negative = digits.first == "-"
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        // A number too large for Int64 is simply "very long".
        let magnitude = Int64(digits) ?? Int64.max / 2
        return negative ? -magnitude : min(magnitude, Int64(maxLifetime))
    }

    private static func trim(_ text: Substring) -> String {
        String(text.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
