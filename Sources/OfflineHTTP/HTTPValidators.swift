import FoundationEssentials
import OfflineAgent

/// Entity-tag and date validators for conditional requests (RFC 9110 §8.8, §13).
package enum HTTPValidators {
    /// Whether an `If-None-Match` value matches `etag` (weak comparison, `*` matches anything).
    package static func noneMatchHits(_ header: String?, etag: String) -> Bool {
        guard let header else { return false }
        let tags = header.split(separator: ",").map { $0.trimmingWhitespace() }
        return tags.contains { $0 == "*" || opaque($0) == opaque(etag[...]) }
    }

    /// Whether an `If-Range` value still describes the file: a strong ETag equal to
    /// `etag`, or exactly its `Last-Modified` date. Anything else means "send it all".
    package static func ifRangeHolds(_ header: String?, etag: String, lastModified: String) -> Bool {
        guard let header else { return true }
        let value = header.trimmingWhitespace()
        if value.hasPrefix("W/") { return false }
        if value.hasPrefix("\"") { return value == etag }
        return value == lastModified
    }

    /// The tag without its weakness marker, for weak comparison.
    private static func opaque(_ tag: Substring) -> Substring {
        tag.hasPrefix("W/") ? tag.dropFirst(2) : tag
    }

    /// An IMF-fixdate for `Last-Modified`.
    package static func httpDate(secondsSince1970 seconds: Int) -> String {
        HTTPDate.string(secondsSince1970: seconds)
    }
}
