extension Int64 {
    /// `self + other`, held at `Int64.max` (or `.min`) instead of trapping: report sums
    /// add numbers devices chose, and no sum of them may stop the server.
    func adding(saturating other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// A stored number read back as a whole count: a REAL that an old SQLite sum overflowed
    /// into is clamped to `0...Int64.max`, a NaN is 0.
    static func clamping(stored value: Double) -> Int64 {
        guard !value.isNaN else { return 0 }
        if value >= 9.2233720368547758e18 { return .max }
        if value <= 0 { return 0 }
        return Int64(value)
    }
}
