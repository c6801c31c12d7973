import Foundation

/// The update description a server returns for one app (PROTOCOL.md, "The manifest").
public struct Manifest: Sendable, Equatable, Codable {
    /// Whether the network allows the download (`wifi` waits for an unmetered network).
    public enum NetworkType: String, Sendable, Codable { case any, wifi }
    /// Transport compression of the full-package file.
    public enum Compression: String, Sendable, Codable { case none, gzip }

    public var app: String
    public var version: Version
    public var miniVersion: Version
    public var isPatch: Bool
    public var baseVersion: Version?
    public var url: String
    public var size: Int64
    public var sha256: String
    public var packageSha256: String
    public var fullUrl: String?
    public var fullSize: Int64?
    public var fullSha256: String?
    public var whitelist: [String]
    public var networkType: NetworkType
    public var rollout: Int
    public var expires: Date?
    public var compression: Compression

    public init(
        app: String, version: Version, miniVersion: Version, isPatch: Bool, baseVersion: Version? = nil,
        url: String, size: Int64, sha256: String, packageSha256: String,
        fullUrl: String? = nil, fullSize: Int64? = nil, fullSha256: String? = nil,
        whitelist: [String], networkType: NetworkType = .any, rollout: Int = 100,
        expires: Date? = nil, compression: Compression = .none
    ) {
        self.app = app
        self.version = version
        self.miniVersion = miniVersion
        self.isPatch = isPatch
        self.baseVersion = baseVersion
        self.url = url
        self.size = size
        self.sha256 = sha256
        self.packageSha256 = packageSha256
        self.fullUrl = fullUrl
        self.fullSize = fullSize
        self.fullSha256 = fullSha256
        self.whitelist = whitelist
        self.networkType = networkType
        self.rollout = rollout
        self.expires = expires
        self.compression = compression
    }

    enum CodingKeys: String, CodingKey {
        case app, version, miniVersion, isPatch, baseVersion, url, size, sha256, packageSha256
        case fullUrl, fullSize, fullSha256, whitelist, networkType, rollout, expires, compression
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        app = try c.decode(String.self, forKey: .app)
        version = try c.decode(Version.self, forKey: .version)
        miniVersion = try c.decode(Version.self, forKey: .miniVersion)
        isPatch = try c.decode(Bool.self, forKey: .isPatch)
        baseVersion = try c.decodeIfPresent(Version.self, forKey: .baseVersion)
        url = try c.decode(String.self, forKey: .url)
        size = try c.decode(Int64.self, forKey: .size)
        sha256 = try c.decode(String.self, forKey: .sha256)
        packageSha256 = try c.decode(String.self, forKey: .packageSha256)
        fullUrl = try c.decodeIfPresent(String.self, forKey: .fullUrl)
        fullSize = try c.decodeIfPresent(Int64.self, forKey: .fullSize)
        fullSha256 = try c.decodeIfPresent(String.self, forKey: .fullSha256)
        whitelist = try c.decode([String].self, forKey: .whitelist)
        networkType = try c.decodeIfPresent(NetworkType.self, forKey: .networkType) ?? .any
        rollout = try c.decodeIfPresent(Int.self, forKey: .rollout) ?? 100
        compression = try c.decodeIfPresent(Compression.self, forKey: .compression) ?? .none
        if let text = try c.decodeIfPresent(String.self, forKey: .expires) {
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(forKey: .expires, in: c, debugDescription: "invalid RFC 3339 time '\(text)'")
            }
            expires = date
        } else {
            expires = nil
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(app, forKey: .app)
        try c.encode(version, forKey: .version)
        try c.encode(miniVersion, forKey: .miniVersion)
        try c.encode(isPatch, forKey: .isPatch)
        try c.encodeIfPresent(baseVersion, forKey: .baseVersion)
        try c.encode(url, forKey: .url)
        try c.encode(size, forKey: .size)
        try c.encode(sha256, forKey: .sha256)
        try c.encode(packageSha256, forKey: .packageSha256)
        try c.encodeIfPresent(fullUrl, forKey: .fullUrl)
        try c.encodeIfPresent(fullSize, forKey: .fullSize)
        try c.encodeIfPresent(fullSha256, forKey: .fullSha256)
        try c.encode(whitelist, forKey: .whitelist)
        try c.encode(networkType, forKey: .networkType)
        try c.encode(rollout, forKey: .rollout)
        try c.encodeIfPresent(expires.map(RFC3339.string(from:)), forKey: .expires)
        if compression != .none { try c.encode(compression, forKey: .compression) }
    }

    /// Decodes and checks a manifest body on its own terms (fields, ranges, hashes);
    /// `validate(forApp:installed:now:)` adds the rules that depend on the device.
    ///
    /// The body is read strictly (`StrictJSON`): a key repeated anywhere, invalid UTF-8
    /// or any other leniency refuses it whole, and every field error names the field
    /// and the rule it breaks (PROTOCOL.md, "The manifest").
    /// - Throws: `OfflineAgentError(.manifest, cause: .manifestInvalid)`.
    public static func decode(_ body: Data) throws -> Manifest {
        let root: StrictJSON
        do {
            root = try StrictJSON.parse(body)
        } catch {
            throw OfflineAgentError(.manifest, "invalid manifest JSON: \(error)", cause: .manifestInvalid)
        }
        guard case .object(let object) = root else {
            throw OfflineAgentError(.manifest, "invalid manifest: the body must be a JSON object", cause: .manifestInvalid)
        }
        let fields = ManifestFields(object)
        let manifest = try Manifest(
            app: fields.app("app"),
            version: fields.version("version"),
            miniVersion: fields.version("miniVersion"),
            isPatch: fields.bool("isPatch"),
            baseVersion: fields.optional("baseVersion", fields.version),
            url: fields.url("url"),
            size: fields.size("size"),
            sha256: fields.sha256("sha256"),
            packageSha256: fields.sha256("packageSha256"),
            fullUrl: fields.optional("fullUrl", fields.url),
            fullSize: fields.optional("fullSize", fields.size),
            fullSha256: fields.optional("fullSha256", fields.sha256),
            whitelist: fields.whitelist("whitelist"),
            networkType: fields.optional("networkType", fields.networkType) ?? .any,
            rollout: fields.optional("rollout", fields.rollout) ?? 100,
            expires: fields.optional("expires", fields.time),
            compression: fields.optional("compression", fields.compression) ?? .none)
        try manifest.checkFields()
        return manifest
    }

    func checkFields() throws {
        func fail(_ reason: String) -> OfflineAgentError { OfflineAgentError(.manifest, reason, cause: .manifestInvalid) }
        guard AppName.isValid(app) else { throw fail(ManifestFields.rule("app")) }
        guard miniVersion <= version else { throw fail("miniVersion \(miniVersion) is above version \(version)") }
        guard size >= 0 else { throw fail(ManifestFields.rule("size")) }
        guard SHA256Hex.isValid(sha256) else { throw fail(ManifestFields.rule("sha256")) }
        guard SHA256Hex.isValid(packageSha256) else { throw fail(ManifestFields.rule("packageSha256")) }
        guard (0...100).contains(rollout) else { throw fail(ManifestFields.rule("rollout")) }
        if let fullSha256, !SHA256Hex.isValid(fullSha256) { throw fail(ManifestFields.rule("fullSha256")) }
        if let fullSize, fullSize < 0 { throw fail(ManifestFields.rule("fullSize")) }
        if isPatch {
            guard let baseVersion else { throw fail("baseVersion is required when isPatch is true") }
            guard baseVersion < version else { throw fail("baseVersion \(baseVersion) is not below version \(version)") }
            guard fullUrl != nil else { throw fail("fullUrl is required when isPatch is true") }
            guard fullSize != nil else { throw fail("fullSize is required when isPatch is true") }
        } else if compression == .none, sha256 != packageSha256 {
            throw fail("sha256 must equal packageSha256 for an uncompressed full package")
        }
    }

    /// The device-dependent rules: right app, not expired, strictly newer than what is installed.
    public func validate(forApp expected: String, installed: Version?, now: Date = Date()) throws {
        guard app == expected else {
            throw OfflineAgentError(.manifest, "manifest is for app '\(app)', not '\(expected)'", cause: .wrongApp)
        }
        if let expires, expires <= now {
            throw OfflineAgentError(.manifest, "manifest expired at \(RFC3339.string(from: expires))", cause: .expired)
        }
        if let installed, version <= installed {
            throw OfflineAgentError(.manifest, "manifest offers \(version), not newer than installed \(installed)", cause: .downgrade)
        }
    }
}

/// Lowercase hex SHA-256 digests as used on the wire.
public enum SHA256Hex {
    public static func isValid(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }
}

/// RFC 3339 timestamps (`2026-12-31T00:00:00Z`, fractional seconds and offsets allowed).
///
/// The plain UTC form is read and written by hand: Foundation's ISO 8601 formatter
/// loads ICU, which costs milliseconds a throttled cron run should not spend.
public enum RFC3339 {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339 §5.6; upper- or
    /// lower-case T and Z), strictly and by hand: ICU's ISO 8601 formatter accepted
    /// 31 February and ended the process (SIGFPE) on some hostile strings (found by
    /// fuzzing the manifest parser). At most 9 fraction digits.
    public static func date(from text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count >= 20, b.count <= 40, let base = utcSeconds(b) else { return nil }
        var i = 19
        var fraction = 0.0
        if b[i] == 46 {  // "."
            var scale = 0.1
            i += 1
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57, i - start < 9 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start, i < b.count, !(b[i] >= 48 && b[i] <= 57) else { return nil }
        }
        var offset = 0
        if b[i] | 0x20 == 122, i == b.count - 1 {  // "Z"
            offset = 0
        } else if b[i] == 43 || b[i] == 45, b.count - i == 6, b[i + 3] == 58 {  // "+HH:MM" / "-HH:MM"
            guard let hours = digits(b, i + 1, 2), let minutes = digits(b, i + 4, 2), hours < 24, minutes < 60 else { return nil }
            offset = (hours * 60 + minutes) * 60 * (b[i] == 43 ? 1 : -1)
        } else {
            return nil
        }
        return Date(timeIntervalSince1970: TimeInterval(base - offset) + fraction)
    }

    /// `count` decimal digits of `b` from `start`, or nil.
    private static func digits(_ b: [UInt8], _ start: Int, _ count: Int) -> Int? {
        guard start >= 0, start + count <= b.count else { return nil }
        var value = 0
        for byte in b[start..<(start + count)] {
            guard byte >= 48, byte <= 57 else { return nil }
            value = value * 10 + Int(byte - 48)
        }
        return value
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, whole seconds, UTC.
    public static func string(from date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))Z"
    }

    /// The seconds since 1970 of the `YYYY-MM-DDTHH:MM:SS` that `b` starts with, read as UTC.
    private static func utcSeconds(_ b: [UInt8]) -> Int? {
        guard b.count >= 19, b[4] == 45, b[7] == 45, b[10] | 0x20 == 116, b[13] == 58, b[16] == 58,
              let year = digits(b, 0, 4), let month = digits(b, 5, 2), let day = digits(b, 8, 2),
              let hour = digits(b, 11, 2), let minute = digits(b, 14, 2), let second = digits(b, 17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        // timegm normalises 31 February into March: refuse dates that moved.
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Int(seconds)
    }
}
