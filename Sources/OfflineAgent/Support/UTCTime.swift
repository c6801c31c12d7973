import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A calendar date and time in UTC as seconds since 1970, for the two date readers
/// (RFC 3339 and cookie `Expires`). Fields are range-checked by the caller; this
/// refuses what is not a date at all.
enum UTCTime {
    /// Nil for a day the month does not have (31 February, 29 February 2023):
    /// `timegm` would quietly carry it into the next month.
    static func seconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int? {
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Int(seconds)
    }
}
