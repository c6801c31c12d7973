import FoundationEssentials

/// What a web address is here, in one place: `http` or `https` only, never an empty
/// host, an IPv6 literal in brackets inside a URL or an authority (`[::1]:8421`, never
/// the ambiguous `::1:8421`), and the scheme's default port when none is written.
package enum WebAddress {
    /// `scheme` lowercased when it is `http` or `https`; nil for any other, or none.
    package static func webScheme(_ scheme: String?) -> String? {
        guard let scheme = scheme?.lowercased(), scheme == "http" || scheme == "https" else { return nil }
        return scheme
    }

    /// 443 for `https`, 80 for `http`.
    package static func defaultPort(scheme: String) -> Int {
        scheme.lowercased() == "https" ? 443 : 80
    }

    /// An absolute `http` or `https` URL with a host.
    package static func isAbsolute(_ url: URL) -> Bool {
        webScheme(url.scheme) != nil && url.host?.isEmpty == false
    }

    /// Text that parses (RFC 3986, as `URLComponents` reads it) as an absolute `http` or
    /// `https` URL with a host.
    package static func isAbsolute(_ text: String) -> Bool {
        guard let components = URLComponents(string: text) else { return false }
        return webScheme(components.scheme) != nil && components.host?.isEmpty == false
    }

    /// `host` without the brackets an IPv6 literal has in a URL.
    package static func unbracketed(_ host: some StringProtocol) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") && host.count >= 2 ? String(host.dropFirst().dropLast()) : String(host)
    }

    /// `host` as a URL writes it: an IPv6 literal (any host with a `:`) in brackets, once.
    package static func bracketed(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }

    /// `host:port`, an IPv6 literal in brackets.
    package static func authority(host: String, port: Int) -> String {
        "\(bracketed(host)):\(port)"
    }

    /// Where `url` connects, `host:port`, with the scheme's port when the URL has none.
    package static func endpoint(of url: URL) -> String {
        authority(host: url.host ?? "?", port: url.port ?? defaultPort(scheme: url.scheme ?? "http"))
    }

    /// The host (brackets removed) and port of an authority or `Host` header value:
    /// `host`, `host:port`, `[v6]` or `[v6]:port`. Nil when malformed: an empty host,
    /// brackets around something that is not IPv6, a bare `:` in an unbracketed host,
    /// or a port that is not 1 to 5 digits.
    package static func split(authority: some StringProtocol) -> (host: Substring, port: Int?)? {
        let text = Substring(authority)
        let host: Substring
        let rest: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            rest = text[text.index(after: close)...]
            // Brackets hold IPv6 only.
            guard host.contains(":") else { return nil }
        } else if let colon = text.firstIndex(of: ":") {
            host = text[..<colon]
            rest = text[colon...]
        } else {
            host = text
            rest = ""
        }
        guard !host.isEmpty else { return nil }
        if rest.isEmpty { return (host, nil) }
        let digits = rest.dropFirst()
        guard rest.first == ":", (1...5).contains(digits.utf8.count),
              digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return (host, Int(digits))
    }
}
