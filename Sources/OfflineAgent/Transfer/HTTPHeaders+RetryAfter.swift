import AsyncHTTPClient
import FoundationEssentials
import Logging
import NIOCore
import NIOHTTP1

extension HTTPHeaders {
    /// Seconds or an HTTP date, as `Retry-After` carries it; nil when absent or unusable
    /// (negative, garbage). Never earlier than `now`; the caller caps how far ahead.
    func retryAfter(now: Date) -> Date? {
        guard let value = first(name: "Retry-After")?.trimmingWhitespace() else { return nil }
        if value.allSatisfy(\.isASCII), value.allSatisfy(\.isNumber), !value.isEmpty {
            // Digits only; a value too long for Int64 is simply "very far ahead".
            let seconds = Int64(value) ?? Int64.max
            return now.addingTimeInterval(TimeInterval(Swift.min(seconds, 86_400 * 366)))
        }
        guard let date = HTTPDate.parse(value).map({ Date(timeIntervalSince1970: TimeInterval($0)) }) else { return nil }
        return Swift.max(date, now)
    }
}
