import Foundation
import Testing
@testable import OfflineAgent

/// The calendar check both date readers (RFC 3339, cookie Expires) rely on.
@Suite("UTC calendar")
struct UTCTimeTests {
    @Test("real days convert; days a month lacks are refused, not carried over", arguments: [
        (2024, 2, 29, 1_709_164_800 as Int?), (2023, 2, 29, nil), (2026, 4, 31, nil), (2026, 2, 31, nil),
        (1970, 1, 1, 0), (2000, 12, 31, 978_220_800), (2100, 2, 29, nil),
    ])
    func days(_ year: Int, _ month: Int, _ day: Int, _ expected: Int?) {
        #expect(UTCTime.seconds(year: year, month: month, day: day, hour: 0, minute: 0, second: 0) == expected)
    }

    @Test("both readers refuse 29 February of a common year and accept it in a leap year")
    func readers() {
        #expect(RFC3339.date(from: "2023-02-29T00:00:00Z") == nil)
        #expect(RFC3339.date(from: "2024-02-29T00:00:00Z") != nil)
        #expect(CookieDate.parse("Wed, 29 Feb 2023 00:00:00 GMT") == nil)
        #expect(CookieDate.parse("Thu, 29 Feb 2024 00:00:00 GMT") == Date(timeIntervalSince1970: 1_709_164_800))
    }
}
