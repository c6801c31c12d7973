import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// RFC 3339 timestamps (`2026-12-31T00:00:00Z`, fractional seconds and offsets allowed).
///
/// The plain UTC form is read and written by hand: Foundation's ISO 8601 formatter
/// loads ICU, which costs milliseconds a throttled cron run should not spend.
public enum RFC3339 {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339 §5.6; upper- or
    /// lower-case T and Z), strictly and by hand: ICU's ISO 8601 formatter accepted
    /// 31 February and ended the process (SIGFPE) on some hostile strings (found by
    /// fuzzing the manifest parser). At most 9 fraction digits.
    public static func date(from text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count >= 20, b.count <= 40, let base = utcSeconds(b) else { return nil }
        var i = 19
        var fraction = 0.0
        if b[i] == 46 {  // "."
            var scale = 0.1
            i += 1
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57, i - start < 9 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start, i < b.count, !(b[i] >= 48 && b[i] <= 57) else { return nil }
        }
        var offset = 0
        if b[i] | 0x20 == 122, i == b.count - 1 {  // "Z"
            offset = 0
        } else if b[i] == 43 || b[i] == 45, b.count - i == 6, b[i + 3] == 58 {  // "+HH:MM" / "-HH:MM"
            guard let hours = digits(b, i + 1, 2), let minutes = digits(b, i + 4, 2), hours < 24, minutes < 60 else { return nil }
            offset = (hours * 60 + minutes) * 60 * (b[i] == 43 ? 1 : -1)
        } else {
            return nil
        }
        return Date(timeIntervalSince1970: TimeInterval(base - offset) + fraction)
    }

    /// `count` decimal digits of `b` from `start`, or nil.
    private static func digits(_ b: [UInt8], _ start: Int, _ count: Int) -> Int? {
        guard start >= 0, start + count <= b.count else { return nil }
        var value = 0
        for byte in b[start..<(start + count)] {
            guard byte >= 48, byte <= 57 else { return nil }
            value = value * 10 + Int(byte - 48)
        }
        return value
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, whole seconds, UTC.
    public static func string(from date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))Z"
    }

    /// The seconds since 1970 of the `YYYY-MM-DDTHH:MM:SS` that `b` starts with, read as UTC.
    private static func utcSeconds(_ b: [UInt8]) -> Int? {
        guard b.count >= 19, b[4] == 45, b[7] == 45, b[10] | 0x20 == 116, b[13] == 58, b[16] == 58,
              let year = digits(b, 0, 4), let month = digits(b, 5, 2), let day = digits(b, 8, 2),
              let hour = digits(b, 11, 2), let minute = digits(b, 14, 2), let second = digits(b, 17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        return UTCTime.seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }
}
