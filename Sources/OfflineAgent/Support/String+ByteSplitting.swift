extension String {
    /// The pieces between each byte `byte` (an ASCII separator), empty ones kept: as a
    /// kernel splits a path or a browser a header.
    ///
    /// Not `split(separator:)`: that compares `Character`s, and a separator that a
    /// grapheme cluster folds into its neighbour (a combining mark after it, a prepended
    /// mark such as U+0600 before it) is then no separator. `"../\u{301}x"` was one
    /// segment to the checks and `..` plus `\u{301}x` to `openat`; `"Path=/\u{600}; Domain=com"`
    /// one cookie attribute to the proxy and two to the browser.
    package func split(onByte byte: UInt8) -> [Substring] {
        utf8.split(separator: byte, omittingEmptySubsequences: false).map { Substring($0) }
    }

    /// The `/`-separated segments of a path (`split(onByte:)`).
    package var pathSegments: [Substring] { split(onByte: UInt8(ascii: "/")) }

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

extension Substring {
    /// The first byte `byte` (an ASCII character), found even inside a grapheme cluster.
    package func firstIndex(ofByte byte: UInt8) -> Index? { utf8.firstIndex(of: byte) }
}
