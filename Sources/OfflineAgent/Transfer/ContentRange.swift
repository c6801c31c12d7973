import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `Content-Range: bytes START-END/TOTAL`.
struct ContentRange: Equatable {
    var start: Int64
    var end: Int64
    var total: Int64?

    init?(_ header: String?) {
        guard let header, header.hasPrefix("bytes ") else { return nil }
        let parts = header.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let start = Self.integer(bounds[0]), let end = Self.integer(bounds[1]), start <= end else { return nil }
        let total: Int64?
        if parts[1] == "*" {
            total = nil
        } else {
            // A total the range does not fit in is no range at all.
            guard let value = Self.integer(parts[1]), end < value else { return nil }
            total = value
        }
        self.start = start
        self.end = end
        self.total = total
    }

    /// Plain decimal digits (no sign, no spaces) that fit an Int64; nil otherwise, never a trap.
    static func integer(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
    }
}
