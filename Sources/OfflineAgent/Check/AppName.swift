
/// App names: `[a-z0-9][a-z0-9._-]{0,63}`.
public enum AppName {
    /// Whether `name` is a valid app name (1–64 bytes of `a-z 0-9 . _ -`, starting with a letter or digit).
    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        func allowed(_ b: UInt8, first: Bool) -> Bool {
            (b >= 97 && b <= 122) || (b >= 48 && b <= 57) || (!first && (b == 46 || b == 95 || b == 45))
        }
        return bytes.enumerated().allSatisfy { allowed($1, first: $0 == 0) }
    }
}
