import FoundationEssentials

/// Lowercase hex SHA-256 digests as used on the wire.
public enum SHA256Hex {
    /// Whether `text` is 64 lowercase hex digits.
    public static func isValid(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }
}
