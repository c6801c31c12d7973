import FoundationEssentials
import OfflineAgent

/// Where `offline-agent serve` sends a request for an app whose active version the
/// kill switch turns off: the network URL the local path stands for.
enum LocalNetworkFallback {
    /// The first http or https prefix of `whitelist` (query and fragment dropped, a
    /// trailing `/` ensured), then `rest` (the percent-encoded path after `/<app>/`) and
    /// `query`; nil when no entry is an absolute http or https URL.
    ///
    /// Plain string assembly: `rest` comes from the request as sent, and may hold
    /// percent-encoding that `URLComponents` would refuse.
    static func location(whitelist: [String], rest: String, query: String?) -> String? {
        for entry in whitelist {
            guard WebAddress.isAbsolute(entry) else { continue }
            var prefix = entry[..<(entry.firstIndex { $0 == "?" || $0 == "#" } ?? entry.endIndex)]
            if !prefix.hasSuffix("/") { prefix += "/" }
            var location = prefix + rest
            if let query { location += "?\(query)" }
            return String(location)
        }
        return nil
    }
}
