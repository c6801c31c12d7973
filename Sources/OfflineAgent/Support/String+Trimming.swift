extension String {
    /// The text without leading and trailing white space and line breaks: Foundation's
    /// `trimmingCharacters(in: .whitespacesAndNewlines)` (Unicode `White_Space` is the same
    /// set as its Z* + U+0009–U+000D + U+0085), without Foundation.
    package func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
