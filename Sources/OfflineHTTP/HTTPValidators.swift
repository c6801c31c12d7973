import Foundation

/// Entity-tag and date validators for conditional requests (RFC 9110 §8.8, §13).
enum HTTPValidators {
    /// Whether an `If-None-Match` value matches `etag` (weak comparison, `*` matches anything).
    static func noneMatchHits(_ header: String?, etag: String) -> Bool {
        guard let header else { return false }
        let tags = header.split(separator: ",").map { $0.trimmingWhitespace() }
        return tags.contains { $0 == "*" || opaque($0) == opaque(etag[...]) }
    }

    /// Whether an `If-Range` value still describes the file: a strong ETag equal to
    /// `etag`, or exactly its `Last-Modified` date. Anything else means "send it all".
    static func ifRangeHolds(_ header: String?, etag: String, lastModified: String) -> Bool {
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

    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for `Last-Modified`,
    /// formatted by hand: no locale, no formatter shared across threads.
    static func httpDate(secondsSince1970 seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
