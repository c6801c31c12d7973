import OfflineAgent

/// A single `Range: bytes=…` request resolved against a file size (RFC 9110 §14).
package enum HTTPRange: Equatable, Sendable {
    /// Serve the whole file with 200: no Range, one the server ignores (another unit,
    /// several ranges, bad syntax), or a failed `If-Range`.
    case full
    /// Serve these bytes with 206.
    case partial(ClosedRange<Int64>)
    /// 416: no byte of the range is in the file.
    case unsatisfiable

    /// Resolves a `Range` header value against a file of `size` bytes.
    ///
    /// Several ranges are answered with the whole file (allowed, and simpler than
    /// multipart/byteranges, which no downloader here asks for).
    package init(header: String?, size: Int64) {
        guard let header else { self = .full; return }
        let trimmed = header.trimmingWhitespace()
        guard trimmed.lowercased().hasPrefix("bytes="), !trimmed.contains(",") else { self = .full; return }
        let spec = trimmed.dropFirst("bytes=".count).trimmingWhitespace()
        guard let dash = spec.firstIndex(of: "-") else { self = .full; return }
        let first = spec[..<dash].trimmingWhitespace(), last = spec[spec.index(after: dash)...].trimmingWhitespace()
        if first.isEmpty {
            // Suffix range: the last N bytes.
            guard let count = Self.number(last) else { self = .full; return }
            guard count > 0, size > 0 else { self = .unsatisfiable; return }
            self = .partial(max(0, size - count)...(size - 1))
            return
        }
        guard let start = Self.number(first) else { self = .full; return }
        var end = size - 1
        if !last.isEmpty {
            guard let value = Self.number(last), value >= start else { self = .full; return }
            end = min(value, size - 1)
        }
        guard start < size else { self = .unsatisfiable; return }
        self = .partial(start...end)
    }

    private static func number(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        // Digits beyond Int64 are a position past any file.
        return Int64(text) ?? Int64.max
    }
}
