extension String {
    /// The text without leading and trailing white space and line breaks, as Foundation's
    /// `trimmingCharacters(in: .whitespacesAndNewlines)` (not in FoundationEssentials):
    /// Unicode `White_Space` (Z*, U+0009–U+000D, U+0085) plus U+200B, which Foundation's
    /// set also holds.
    package func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !Self.isWhitespace($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !Self.isWhitespace($0) })!
        return String(scalars[first...last])
    }

    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || scalar == "\u{200B}"
    }
}
