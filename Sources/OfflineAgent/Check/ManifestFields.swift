import FoundationEssentials

/// Reads the fields of a strictly parsed manifest object, one rule per field: a
/// field that breaks its rule is refused with a message naming the field and the
/// rule (`rollout must be an integer 0…100`), never a decoder's generic text.
///
/// Numbers are taken only as plain decimal integers that fit their range: no sign,
/// fraction or exponent, no rounding (`1e3`, `5.0`, `-1` and `9223372036854775808`
/// are all refused as sizes), so no untrusted number reaches arithmetic unchecked.
package struct ManifestFields {
    let object: [String: StrictJSON]

    init(_ object: [String: StrictJSON]) { self.object = object }

    /// The rule each field must follow, as stated in errors and in `docs/PROTOCOL.md`.
    static func rule(_ field: String) -> String {
        switch field {
        case "app": "app must be a name matching [a-z0-9][a-z0-9._-]{0,63}"
        case "version", "miniVersion", "baseVersion":
            "\(field) must be dotted decimal numbers (1 to 8 components, each 0…999999999)"
        case "isPatch": "isPatch must be true or false"
        case "url", "fullUrl": "\(field) must be an http(s) URL, absolute or relative to the manifest"
        case "size", "fullSize": "\(field) must be an integer 0…\(Int64.max)"
        case "sha256", "packageSha256", "fullSha256": "\(field) must be 64 lowercase hex digits"
        case "whitelist": "whitelist must be an array of absolute http(s) URLs"
        case "networkType": "networkType must be \"any\" or \"wifi\""
        case "rollout": "rollout must be an integer 0…100"
        case "expires": "expires must be an RFC 3339 time"
        case "compression": "compression must be \"none\" or \"gzip\""
        case "fallback":
            "fallback must be a normalised relative path of a file in the package (no leading '/', no empty, '.' or '..' segments, no trailing '/', no '\\', NUL, '?' or '#', at most \(maxPackagePath) bytes)"
        case "trialLaunches": "trialLaunches must be an integer 0…\(Manifest.maxTrialLaunches)"
        case "patches": "patches must be an array of at most \(ManifestPatch.maxCount) objects {baseVersion, url, size, sha256}"
        case "format": "format must be an integer 1…\(Manifest.formatVersion)"
        case "publishedAt": "publishedAt must be an RFC 3339 time"
        case "stage": "stage must be an integer 0…100"
        case "stageSchedule":
            "stageSchedule must be an array of 1 to \(ManifestStageStep.maxCount) objects {afterSeconds, percent}"
        case "epoch": "epoch must be an integer 0…\(Manifest.maxEpoch)"
        default: "\(field) is invalid"
        }
    }

    private func invalid(_ field: String) -> OfflineAgentError {
        OfflineAgentError(.manifest, Self.rule(field), cause: .manifestInvalid)
    }

    private func required(_ field: String) throws -> StrictJSON {
        guard let value = object[field], value != .null else {
            throw OfflineAgentError(.manifest, "missing field '\(field)'", cause: .manifestInvalid)
        }
        return value
    }

    /// An optional field: absent and `null` both mean "not given".
    func optional<T>(_ field: String, _ read: (String) throws -> T) throws -> T? {
        guard let value = object[field], value != .null else { return nil }
        return try read(field)
    }

    private func text(_ field: String) throws -> String {
        guard case .string(let text) = try required(field) else { throw invalid(field) }
        return text
    }

    func app(_ field: String) throws -> String {
        let name = try text(field)
        guard AppName.isValid(name) else { throw invalid(field) }
        return name
    }

    func version(_ field: String) throws -> Version {
        guard let version = Version(try text(field)) else { throw invalid(field) }
        return version
    }

    func bool(_ field: String) throws -> Bool {
        guard case .bool(let value) = try required(field) else { throw invalid(field) }
        return value
    }

    func url(_ field: String) throws -> String {
        let text = try text(field)
        guard Self.isFileURL(text) else { throw invalid(field) }
        return text
    }

    func size(_ field: String) throws -> Int64 {
        guard let value = try integer(field) else { throw invalid(field) }
        return value
    }

    func rollout(_ field: String) throws -> Int {
        guard let value = try integer(field), value <= 100 else { throw invalid(field) }
        return Int(value)
    }

    func trialLaunches(_ field: String) throws -> Int {
        guard let value = try integer(field), value <= Manifest.maxTrialLaunches else { throw invalid(field) }
        return Int(value)
    }

    func sha256(_ field: String) throws -> String {
        let text = try text(field)
        guard SHA256Hex.isValid(text) else { throw invalid(field) }
        return text
    }

    func whitelist(_ field: String) throws -> [String] {
        guard case .array(let elements) = try required(field) else { throw invalid(field) }
        return try elements.map { element in
            guard case .string(let prefix) = element, WebAddress.isAbsolute(prefix) else { throw invalid(field) }
            return prefix
        }
    }

    func networkType(_ field: String) throws -> Manifest.NetworkType {
        guard let type = Manifest.NetworkType(rawValue: try text(field)) else { throw invalid(field) }
        return type
    }

    func compression(_ field: String) throws -> Manifest.Compression {
        guard let compression = Manifest.Compression(rawValue: try text(field)) else { throw invalid(field) }
        return compression
    }

    /// Each entry is read with the same field rules as the top level; an error names
    /// the entry (`patches[1]: size must be an integer …`).
    func patches(_ field: String) throws -> [ManifestPatch] {
        guard case .array(let elements) = try required(field), elements.count <= ManifestPatch.maxCount else {
            throw invalid(field)
        }
        return try elements.enumerated().map { index, element in
            guard case .object(let object) = element else { throw invalid(field) }
            let entry = ManifestFields(object)
            do {
                return ManifestPatch(
                    baseVersion: try entry.version("baseVersion"), url: try entry.url("url"),
                    size: try entry.size("size"), sha256: try entry.sha256("sha256"))
            } catch let error as OfflineAgentError {
                throw OfflineAgentError(.manifest, "\(field)[\(index)]: \(error.reason)", cause: .manifestInvalid)
            }
        }
    }

    func format(_ field: String) throws -> Int {
        guard let value = try integer(field), (1...Int64(Manifest.formatVersion)).contains(value) else { throw invalid(field) }
        return Int(value)
    }

    func epoch(_ field: String) throws -> Int {
        guard let value = try integer(field), value <= Int64(Manifest.maxEpoch) else { throw invalid(field) }
        return Int(value)
    }

    func percent(_ field: String) throws -> Int {
        guard let value = try integer(field), value <= 100 else { throw invalid(field) }
        return Int(value)
    }

    /// Each step with its index in errors, like `patches`.
    func stageSchedule(_ field: String) throws -> [ManifestStageStep] {
        guard case .array(let elements) = try required(field), !elements.isEmpty, elements.count <= ManifestStageStep.maxCount else {
            throw invalid(field)
        }
        return try elements.enumerated().map { index, element in
            guard case .object(let object) = element else { throw invalid(field) }
            let entry = ManifestFields(object)
            guard let offset = try? entry.integer("afterSeconds"), offset <= ManifestStageStep.maxOffset else {
                throw OfflineAgentError(
                    .manifest, "\(field)[\(index)]: afterSeconds must be an integer 0…\(ManifestStageStep.maxOffset)", cause: .manifestInvalid)
            }
            guard let percent = try? entry.integer("percent"), percent <= 100 else {
                throw OfflineAgentError(.manifest, "\(field)[\(index)]: percent must be an integer 0…100", cause: .manifestInvalid)
            }
            return ManifestStageStep(afterSeconds: offset, percent: Int(percent))
        }
    }

    func fallback(_ field: String) throws -> String {
        let path = try text(field)
        guard Self.isPackagePath(path) else { throw invalid(field) }
        return path
    }

    /// The longest `fallback` path accepted.
    static let maxPackagePath = 1024

    /// A normalised relative path inside the package: `/`-separated segments, none
    /// empty, `.` or `..`, without `\`, NUL, `?`, `#` or control characters, so it names
    /// one file on every platform and cannot leave the version directory.
    package static func isPackagePath(_ path: String) -> Bool {
        guard !path.isEmpty, path.utf8.count <= maxPackagePath,
              !path.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") })
        else { return false }
        return path.pathSegments.allSatisfy { !$0.isEmpty && !$0.isDotSegment }
    }

    func time(_ field: String) throws -> Date {
        guard let date = RFC3339.date(from: try text(field)) else { throw invalid(field) }
        return date
    }

    /// A plain decimal integer 0…Int64.max, or nil for any other number or type.
    private func integer(_ field: String) throws -> Int64? {
        guard case .number(let text) = try required(field),
              text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        // Int64(_:) returns nil past Int64.max instead of trapping or rounding.
        return Int64(text)
    }

    /// A file URL: absolute http(s) with a host, or a reference resolved against the
    /// manifest URL (which is http(s) itself); any other scheme is refused.
    static func isFileURL(_ text: String) -> Bool {
        guard !text.isEmpty, let components = URLComponents(string: text) else { return false }
        return components.scheme == nil || WebAddress.isAbsolute(text)
    }

}
