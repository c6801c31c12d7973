extension String {
    /// The `/`-separated segments of a path, split on the byte `/` as the kernel splits it.
    ///
    /// Not `split(separator: "/")`: that compares `Character`s, and a `/` that a grapheme
    /// cluster folds into its neighbour (a combining mark after it, a prepended mark before
    /// it) is then no separator, so `"../\u{301}x"` was one segment to the checks and `..`
    /// plus `\u{301}x` to `openat`.
    package var pathSegments: [Substring] {
        utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { Substring($0) }
    }

    /// Whether the path begins or ends with the byte `/` (see `pathSegments`).
    package var startsWithSlash: Bool { utf8.first == UInt8(ascii: "/") }
    package var endsWithSlash: Bool { utf8.last == UInt8(ascii: "/") }
}

extension StringProtocol {
    /// Whether this segment is `.` or `..` byte for byte, as the kernel reads it.
    package var isDotSegment: Bool { utf8.elementsEqual(".".utf8) || utf8.elementsEqual("..".utf8) }

    /// Whether the text holds the byte `byte` (an ASCII character that a `Character`
    /// comparison misses inside a grapheme cluster).
    package func containsByte(_ byte: UInt8) -> Bool { utf8.contains(byte) }
}
