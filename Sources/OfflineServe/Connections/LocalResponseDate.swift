import OfflineHTTP
#if canImport(Glibc)
import Glibc
#endif

/// The `Date` value of the responses a connection's handlers write themselves
/// (`LocalImmediateResponder`, `LocalRawResponder`), as Hummingbird adds it to every
/// response it writes: made at most once a second (RFC 9110 §6.6.1).
struct LocalResponseDate {
    private var second = -1
    private var text = ""

    /// The value for now.
    mutating func current() -> String {
        let now = time(nil)
        if now != second { (second, text) = (now, HTTPValidators.httpDate(secondsSince1970: now)) }
        return text
    }
}
