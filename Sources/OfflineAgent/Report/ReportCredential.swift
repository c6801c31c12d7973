import FoundationEssentials

/// A device's own fleet-report credential (docs/PROTOCOL.md, "Enrolment"): the collector
/// derives it from its secret and the device id, so it speaks for that one device.
///
/// A device gets it once from `POST /enrol` (authorised by the fleet's bearer token) and
/// sends it with each report as `Authorization: Device ID:CREDENTIAL`.
public struct ReportCredential: Sendable, Equatable, Codable {
    /// The device id the credential speaks for.
    public var device: String
    /// 64 lowercase hex digits.
    public var credential: String

    /// The `Authorization` scheme of a report sent with a credential.
    public static let scheme = "Device"
    /// What an enrolable device id may be, as collector and devices check it.
    public static let deviceRule = "1 to 128 characters from A-Z, a-z, 0-9, '.', '_' and '-'"

    public init(device: String, credential: String) {
        self.device = device
        self.credential = credential
    }

    /// True when `device` is 1 to 128 of `A-Za-z0-9._-`: it fits a header without
    /// quoting, and the root's own ids (lowercase UUIDs) always do.
    public static func isValidDevice(_ device: String) -> Bool {
        (1...128).contains(device.utf8.count)
            && device.utf8.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    /// True when `credential` is 64 lowercase hex digits (an HMAC-SHA256).
    public static func isValidCredential(_ credential: String) -> Bool {
        credential.utf8.count == 64
            && credential.utf8.allSatisfy { ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) }
    }

    /// True when both parts are well formed.
    public var isValid: Bool { Self.isValidDevice(device) && Self.isValidCredential(credential) }

    /// `Device ID:CREDENTIAL`, the value of the `Authorization` header.
    public var authorization: String { "\(Self.scheme) \(device):\(credential)" }

    /// The credential an `Authorization` value carries; nil for another scheme or a malformed one.
    public init?(authorization: String) {
        let prefix = Self.scheme + " "
        guard authorization.utf8.count > prefix.utf8.count,
              authorization.prefix(prefix.count).lowercased() == prefix.lowercased() else { return nil }
        let value = String(authorization.dropFirst(prefix.count)).trimmingWhitespace()
        guard let colon = value.lastIndex(of: ":") else { return nil }
        let parsed = ReportCredential(device: String(value[..<colon]), credential: String(value[value.index(after: colon)...]))
        guard parsed.isValid else { return nil }
        self = parsed
    }

    /// The collector's enrolment URL beside `report`: its last path segment replaced by `enrol`.
    public static func enrolURL(report: URL) -> URL {
        report.deletingLastPathComponent().appendingPathComponent("enrol")
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
    }
}
