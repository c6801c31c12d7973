import FoundationEssentials

/// The update description a server returns for one app (`docs/PROTOCOL.md`, "The manifest").
public struct Manifest: Sendable, Equatable, Codable {
    /// Whether the network allows the download (`wifi` waits for an unmetered network).
    public enum NetworkType: String, Sendable, Codable { case any, wifi }
    /// Transport compression of the full-package file.
    public enum Compression: String, Sendable, Codable { case none, gzip }
    /// The largest `trialLaunches` a manifest may ask for.
    public static let maxTrialLaunches = 1000

    /// The app the manifest is for; must equal the app synced.
    public var app: String
    /// The version offered.
    public var version: Version
    /// The lowest version still allowed offline; older installed versions fall back to the network (kill switch).
    public var miniVersion: Version
    /// Whether `url` is a bsdiff patch from `baseVersion` rather than a full package.
    public var isPatch: Bool
    /// For a patch: the installed version it applies to.
    public var baseVersion: Version?
    /// The file to download: the full package zip, or the patch when `isPatch`.
    public var url: String
    /// The exact byte size of the file at `url`.
    public var size: Int64
    /// Lowercase hex SHA-256 of the file at `url`.
    public var sha256: String
    /// Lowercase hex SHA-256 of the full package zip the download yields (after patching).
    public var packageSha256: String
    /// For a patch: the full package to fall back to when the patch cannot be used.
    public var fullUrl: String?
    /// The byte size of the file at `fullUrl`.
    public var fullSize: Int64?
    /// Lowercase hex SHA-256 of the file at `fullUrl`.
    public var fullSha256: String?
    /// The URL prefixes the package serves offline.
    public var whitelist: [String]
    /// Whether the download may use a metered network.
    public var networkType: NetworkType
    /// The share of devices (0–100) allowed to use the version offline (gray switch).
    public var rollout: Int
    /// After this time the manifest is not trusted; nil: it never expires.
    public var expires: Date?
    /// Transport compression of the full-package file.
    public var compression: Compression
    /// Patches to `version` from recent versions (a static manifest's deltas); the
    /// agent takes the one whose `baseVersion` is installed. Empty when not given.
    public var patches: [ManifestPatch]
    /// The package's entry page for single-page routes on a mirrored origin (e.g.
    /// `index.html`): a normalised relative path of a file in the package; nil when none.
    public var fallback: String?
    /// The publisher's trial request (`offline-publish publish --trial-launches N`): the
    /// version stays on trial for N launches and is rolled back unless the host confirms
    /// it (`mark-good`). Nil or 0: no trial, the version is good once installed. A device
    /// setting (`AgentConfiguration.maxTrialLaunches`) wins over it.
    public var trialLaunches: Int?
    /// The manifest format (`docs/PROTOCOL.md`, "Manifest format"): 1 when absent; this
    /// agent reads up to `Manifest.formatVersion` and refuses a newer one, whose rules it
    /// could not keep.
    public var format: Int = 1
    /// When the version was published: what `stageSchedule` is measured from; nil when not given.
    public var publishedAt: Date?
    /// The staged rollout's share of devices (0–100) that may download and install the
    /// version; nil means 100. Exclusive with `stageSchedule`.
    public var stage: Int?
    /// The staged rollout as steps in time after `publishedAt`; empty when not given.
    public var stageSchedule: [ManifestStageStep] = []
    /// The release epoch (`docs/PROTOCOL.md`, "Epochs"): 0 when absent. A device never
    /// accepts a lower epoch than one it accepted, and a higher epoch may offer a
    /// version below the installed one: the recovery from a version published too high.
    public var epoch: Int = 0
    /// The largest `epoch` a manifest may give.
    public static let maxEpoch = 999_999_999

    /// A manifest with every field given; `Manifest.decode` is what checks a server's manifest.
    public init(
        app: String, version: Version, miniVersion: Version, isPatch: Bool, baseVersion: Version? = nil,
        url: String, size: Int64, sha256: String, packageSha256: String,
        fullUrl: String? = nil, fullSize: Int64? = nil, fullSha256: String? = nil,
        whitelist: [String], networkType: NetworkType = .any, rollout: Int = 100,
        expires: Date? = nil, compression: Compression = .none, patches: [ManifestPatch] = [], fallback: String? = nil,
        trialLaunches: Int? = nil
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
        self.patches = patches
        self.fallback = fallback
        self.trialLaunches = trialLaunches
    }

    enum CodingKeys: String, CodingKey {
        case app, version, miniVersion, isPatch, baseVersion, url, size, sha256, packageSha256
        case fullUrl, fullSize, fullSha256, whitelist, networkType, rollout, expires, compression, patches, fallback
        case trialLaunches
        case format, publishedAt, stage, stageSchedule
        case epoch
    }

    /// Decodes the wire form (see `Manifest.decode` for the strict checks a server's bytes get).
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
        patches = try c.decodeIfPresent([ManifestPatch].self, forKey: .patches) ?? []
        fallback = try c.decodeIfPresent(String.self, forKey: .fallback)
        trialLaunches = try c.decodeIfPresent(Int.self, forKey: .trialLaunches)
        format = try c.decodeIfPresent(Int.self, forKey: .format) ?? 1
        stage = try c.decodeIfPresent(Int.self, forKey: .stage)
        stageSchedule = try c.decodeIfPresent([ManifestStageStep].self, forKey: .stageSchedule) ?? []
        epoch = try c.decodeIfPresent(Int.self, forKey: .epoch) ?? 0
        if let text = try c.decodeIfPresent(String.self, forKey: .publishedAt) {
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(forKey: .publishedAt, in: c, debugDescription: "invalid RFC 3339 time '\(text)'")
            }
            publishedAt = date
        }
        if let text = try c.decodeIfPresent(String.self, forKey: .expires) {
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(forKey: .expires, in: c, debugDescription: "invalid RFC 3339 time '\(text)'")
            }
            expires = date
        } else {
            expires = nil
        }
    }

    /// Encodes the wire form.
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
        // Absent rather than empty: manifests without patches keep their bytes (and ETags, signatures).
        if !patches.isEmpty { try c.encode(patches, forKey: .patches) }
        try c.encodeIfPresent(fallback, forKey: .fallback)
        try c.encodeIfPresent(trialLaunches, forKey: .trialLaunches)
        // Format 1 manifests keep their bytes: the new fields appear only when used.
        if format != 1 { try c.encode(format, forKey: .format) }
        try c.encodeIfPresent(publishedAt.map(RFC3339.string(from:)), forKey: .publishedAt)
        try c.encodeIfPresent(stage, forKey: .stage)
        if !stageSchedule.isEmpty { try c.encode(stageSchedule, forKey: .stageSchedule) }
        // Epoch 0 is absent: manifests from before epochs keep their bytes.
        if epoch != 0 { try c.encode(epoch, forKey: .epoch) }
    }

    /// Decodes and checks a manifest body on its own terms (fields, ranges, hashes);
    /// `validate(forApp:installed:now:)` adds the rules that depend on the device.
    ///
    /// The body is read strictly (`StrictJSON`): a key repeated anywhere, invalid UTF-8
    /// or any other leniency refuses it whole, and every field error names the field
    /// and the rule it breaks (`docs/PROTOCOL.md`, "The manifest").
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
        var manifest = try Manifest(
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
            compression: fields.optional("compression", fields.compression) ?? .none,
            patches: fields.optional("patches", fields.patches) ?? [],
            fallback: fields.optional("fallback", fields.fallback),
            trialLaunches: fields.optional("trialLaunches", fields.trialLaunches))
        manifest.format = try fields.optional("format", fields.format) ?? 1
        manifest.publishedAt = try fields.optional("publishedAt", fields.time)
        manifest.stage = try fields.optional("stage", fields.percent)
        manifest.stageSchedule = try fields.optional("stageSchedule", fields.stageSchedule) ?? []
        manifest.epoch = try fields.optional("epoch", fields.epoch) ?? 0
        try manifest.checkFields()
        return manifest
    }

    package func checkFields() throws {
        func fail(_ reason: String) -> OfflineAgentError { OfflineAgentError(.manifest, reason, cause: .manifestInvalid) }
        guard AppName.isValid(app) else { throw fail(ManifestFields.rule("app")) }
        guard miniVersion <= version else { throw fail("miniVersion \(miniVersion) is above version \(version)") }
        guard size >= 0 else { throw fail(ManifestFields.rule("size")) }
        guard SHA256Hex.isValid(sha256) else { throw fail(ManifestFields.rule("sha256")) }
        guard SHA256Hex.isValid(packageSha256) else { throw fail(ManifestFields.rule("packageSha256")) }
        guard (0...100).contains(rollout) else { throw fail(ManifestFields.rule("rollout")) }
        guard (0...Manifest.maxEpoch).contains(epoch) else { throw fail(ManifestFields.rule("epoch")) }
        if let fullSha256, !SHA256Hex.isValid(fullSha256) { throw fail(ManifestFields.rule("fullSha256")) }
        if let fullSize, fullSize < 0 { throw fail(ManifestFields.rule("fullSize")) }
        if let fallback, !ManifestFields.isPackagePath(fallback) { throw fail(ManifestFields.rule("fallback")) }
        if let trialLaunches, !(0...Manifest.maxTrialLaunches).contains(trialLaunches) { throw fail(ManifestFields.rule("trialLaunches")) }
        if isPatch {
            guard let baseVersion else { throw fail("baseVersion is required when isPatch is true") }
            guard baseVersion < version else { throw fail("baseVersion \(baseVersion) is not below version \(version)") }
            guard fullUrl != nil else { throw fail("fullUrl is required when isPatch is true") }
            guard fullSize != nil else { throw fail("fullSize is required when isPatch is true") }
        } else if compression == .none, sha256 != packageSha256 {
            throw fail("sha256 must equal packageSha256 for an uncompressed full package")
        }
        try checkPatches(fail)
        try checkStage(fail)
    }

    /// The `patches` list: bounded, each entry well formed and below `version`, one
    /// entry per base (`1.0` and `1.0.0` are one base), and an entry for the top-level
    /// patch's base naming the same file, so that the body means one thing.
    private func checkPatches(_ fail: (String) -> OfflineAgentError) throws {
        guard patches.count <= ManifestPatch.maxCount else { throw fail(ManifestFields.rule("patches")) }
        var seen: [Version] = []
        for (index, patch) in patches.enumerated() {
            let name = "patches[\(index)]"
            guard patch.size >= 0 else { throw fail("\(name): " + ManifestFields.rule("size")) }
            guard SHA256Hex.isValid(patch.sha256) else { throw fail("\(name): " + ManifestFields.rule("sha256")) }
            guard ManifestFields.isFileURL(patch.url) else { throw fail("\(name): " + ManifestFields.rule("url")) }
            guard patch.baseVersion < version else {
                throw fail("\(name): baseVersion \(patch.baseVersion) is not below version \(version)")
            }
            guard !seen.contains(patch.baseVersion) else {
                throw fail("\(name): baseVersion \(patch.baseVersion) is listed twice")
            }
            seen.append(patch.baseVersion)
            if isPatch, patch.baseVersion == baseVersion, patch.sha256 != sha256 || patch.size != size {
                throw fail("\(name): the patch from \(patch.baseVersion) differs from the top-level one")
            }
        }
    }

    /// The patch to download for `installed`: the top-level one (`isPatch`) when its
    /// base is installed, else the `patches` entry for it; nil means the full package.
    public func patch(from installed: Version?) -> ManifestPatch? {
        guard let installed else { return nil }
        if isPatch, let baseVersion, baseVersion == installed {
            return ManifestPatch(baseVersion: baseVersion, url: url, size: size, sha256: sha256)
        }
        return patches.first { $0.baseVersion == installed }
    }

    /// The full package file: `url` for a full manifest, `fullUrl` for a patch one.
    /// `sha256` is nil when the manifest gives no hash of that very file.
    public var fullFile: (url: String, size: Int64, sha256: String?) {
        isPatch ? (fullUrl ?? "", fullSize ?? 0, fullSha256) : (url, size, sha256)
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
