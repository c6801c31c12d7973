import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The `Expires` date of a cookie, read by the deliberately lenient algorithm of
/// RFC 6265 §5.1.1: servers send every date format HTTP has known
/// (`Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT`,
/// `Sun Nov  6 08:49:37 1994`, …), and all of them must be understood.
enum CookieDate {
    static func parse(_ text: String) -> Date? {
        var time: (Int, Int, Int)?, day: Int?, month: Int?, year: Int?
        for token in tokens(text) {
            if time == nil, let value = self.time(token) {
                time = value
            } else if day == nil, let value = digits(token, 1...2) {
                day = value
            } else if month == nil, let value = self.month(token) {
                month = value
            } else if year == nil, let value = digits(token, 2...4) {
                year = value
            }
        }
        guard let (hour, minute, second) = time, let day, let month, var year else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, hour <= 23, minute <= 59, second <= 59 else { return nil }
        guard let seconds = UTCTime.seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second) else {
            return nil
        }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// Splits at the delimiters of §5.1.1: everything but digits, letters and `:`.
    private static func tokens(_ text: String) -> [ArraySlice<UInt8>] {
        let bytes = Array(text.utf8)
        func isDelimiter(_ b: UInt8) -> Bool {
            b == 0x09 || (0x20...0x2F).contains(b) || (0x3B...0x40).contains(b) || (0x5B...0x60).contains(b) || (0x7B...0x7E).contains(b)
        }
        return bytes.split(whereSeparator: isDelimiter)
    }

    private static func isDigit(_ b: UInt8) -> Bool { b >= 48 && b <= 57 }

    /// `count` leading digits (anything may follow them, as the grammar allows).
    private static func digits(_ token: ArraySlice<UInt8>, _ count: ClosedRange<Int>) -> Int? {
        let run = token.prefix(while: isDigit)
        guard count.contains(run.count), run.count == token.count || !isDigit(token[run.endIndex]) else { return nil }
        return run.reduce(0) { $0 * 10 + Int($1 - 48) }
    }

    /// `h[h]:m[m]:s[s]`, optionally followed by non-digits.
    private static func time(_ token: ArraySlice<UInt8>) -> (Int, Int, Int)? {
        var values: [Int] = []
        var rest = token[...]
        for index in 0..<3 {
            let run = rest.prefix(while: isDigit)
            guard (1...2).contains(run.count) else { return nil }
            values.append(run.reduce(0) { $0 * 10 + Int($1 - 48) })
            rest = rest[run.endIndex...]
            if index < 2 {
                guard rest.first == UInt8(ascii: ":") else { return nil }
                rest = rest.dropFirst()
            }
        }
        if let next = rest.first, isDigit(next) { return nil }
        return (values[0], values[1], values[2])
    }

    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    private static func month(_ token: ArraySlice<UInt8>) -> Int? {
        guard token.count >= 3 else { return nil }
        let prefix = String(decoding: token.prefix(3), as: UTF8.self).lowercased()
        return months.firstIndex(of: prefix).map { $0 + 1 }
    }
}
