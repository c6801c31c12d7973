/// The bearer token a fleet-report collector may require (`offline-server --report-token`):
/// devices send it as `Authorization: Bearer TOKEN` on each report POST.
public enum ReportToken {
    /// What a token may be, as collector and devices check it.
    public static let rule = "1 to 512 visible ASCII characters"

    /// True when `token` is 1 to 512 visible ASCII characters: nothing that could end or
    /// split the header line, and the same rule the collector applies.
    public static func isValid(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.count <= 512 && token.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
    }
}
