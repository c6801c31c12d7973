import FoundationEssentials
import OfflineAgent
import OfflineHTTP

/// Moves absolute URLs between an origin and its mirror (`MirrorOrigin`), for the
/// headers that carry URLs (`docs/PROTOCOL.md`, "Mirrored origins", "Forwarding").
enum LocationRewriter {
    /// A `Location` or `Content-Location` the origin sent, as the page should follow
    /// it: an absolute URL on a mirrored origin (`isMirrored`) becomes the same URL on
    /// its mirror; nil (keep the value) for a relative reference, a URL on an origin
    /// that is not mirrored, or anything unparsable. Relative references already
    /// resolve against the mirror the page is on.
    static func toMirror(_ value: String, servePort: Int, isMirrored: (MirrorOrigin) -> Bool) -> String? {
        let trimmed = String(value.trimmingWhitespace())
        guard isAbsoluteWebURL(trimmed), let url = URL(string: trimmed), let origin = MirrorOrigin(url: url),
              isMirrored(origin) else { return nil }
        return origin.mirrorURL(for: url, servePort: servePort)
    }

    /// A URL on a mirror served on `servePort` (`http://<mirror host>:<servePort>/…`),
    /// as the same URL on the origin the mirror stands for; nil for any other URL.
    static func toOrigin(_ value: String, servePort: Int) -> String? {
        let trimmed = String(value.trimmingWhitespace())
        guard trimmed.lowercased().hasPrefix("http://"), let url = URL(string: trimmed), let host = url.host,
              url.port == servePort, let origin = MirrorOrigin(mirrorHost: host),
              var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return nil }
        components.scheme = origin.scheme
        components.host = origin.host
        components.port = origin.port == WebAddress.defaultPort(scheme: origin.scheme) ? nil : origin.port
        if components.percentEncodedPath.isEmpty { components.percentEncodedPath = "/" }
        return components.string
    }

    /// `http://…` or `https://…` (any case).
    private static func isAbsoluteWebURL(_ value: String) -> Bool {
        let lowered = value.prefix(8).lowercased()
        return lowered.hasPrefix("http://") || lowered.hasPrefix("https://")
    }
}
