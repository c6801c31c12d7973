import Foundation
import OfflineAgent

/// What a publish directory knows about one app: `<publish dir>/<app>/state.json`.
///
/// Its rename is the commit point of every verb (`PublishCommit`) and it is the only
/// thing a server reads to answer manifest requests; the files it names live
/// beside it. Its only times are `publishedAt` and the revisions' (both
/// `PublishOptions.now`), so publishing the same input at the same time gives the
/// same bytes.
public struct PublishState: Sendable, Equatable, Codable {
    /// One published version: its package (stored zip) and the gzip of that package.
    public struct Release: Sendable, Equatable, Codable {
        public var version: Version
        /// Byte length and SHA-256 of `<version>.zip`.
        public var size: Int64
        public var sha256: String
        /// Byte length and SHA-256 of `<version>.zip.gz`.
        public var gzipSize: Int64
        public var gzipSha256: String
        /// The publisher's trial request for this version (`publish --trial-launches`),
        /// written into its manifest as `trialLaunches`; nil: no trial (absent from
        /// older states, whose bytes stay as they were).
        public var trialLaunches: Int?
        /// The release epoch its manifest carries (`publish --epoch`, `revert --new-epoch`);
        /// nil: 0 (absent from states written before epochs, whose bytes stay as they were).
        public var epoch: Int?

        public init(version: Version, size: Int64, sha256: String, gzipSize: Int64, gzipSha256: String, trialLaunches: Int? = nil) {
            self.version = version
            self.size = size
            self.sha256 = sha256
            self.gzipSize = gzipSize
            self.gzipSha256 = gzipSha256
            self.trialLaunches = trialLaunches
        }

        /// The epoch, 0 when none was given.
        public var epochValue: Int { epoch ?? 0 }

        /// Whether this release comes after `other` for a device: a higher epoch, or the
        /// same epoch and a higher version.
        public func isAfter(_ other: Release) -> Bool {
            epochValue != other.epochValue ? epochValue > other.epochValue : version > other.version
        }

        /// File name of the package, relative to the app directory.
        public var packageFile: String { "\(version).zip" }
        /// File name of the gzip-compressed package, relative to the app directory.
        public var gzipFile: String { "\(version).zip.gz" }
    }

    /// A BSDIFF40 patch from `from` to the latest version: `<from>-<to>.bsdiff`.
    public struct Patch: Sendable, Equatable, Codable {
        public var from: Version
        public var to: Version
        public var size: Int64
        public var sha256: String

        public init(from: Version, to: Version, size: Int64, sha256: String) {
            self.from = from
            self.to = to
            self.size = size
            self.sha256 = sha256
        }

        /// File name of the patch, relative to the app directory.
        public var file: String { "\(from)-\(to).bsdiff" }
    }

    /// A file derived from the state and put in place after its commit
    /// (`PublishCommit`): `manifest.json`, `manifest.json.sig`.
    public struct DerivedFile: Sendable, Equatable, Codable {
        /// Its name in the app directory.
        public var name: String
        /// SHA-256 of the bytes it must have; nil: it must not exist.
        public var sha256: String?

        public init(name: String, sha256: String?) {
            self.name = name
            self.sha256 = sha256
        }
    }

    public var app: String
    public var latest: Version
    public var miniVersion: Version
    public var whitelist: [String]
    public var rollout: Int
    public var networkType: Manifest.NetworkType
    /// RFC 3339 time after which manifests must not be trusted; nil for none.
    public var expires: String?
    /// Every published version, oldest first; the last one is `latest`.
    public var versions: [Release]
    /// Patches to `latest` from the versions before it (the last few only).
    public var patches: [Patch]
    /// The manifest's `fallback` (the entry page for single-page routes); nil for none.
    public var fallback: String?
    /// When `latest` was published (RFC 3339): what the manifest's `stageSchedule` is
    /// measured from. nil in states written before staged rollouts.
    public var publishedAt: String?
    /// The staged rollout of `latest` (0–100, 0 halts it); nil means 100.
    public var stage: Int?
    /// The staged rollout as a schedule after `publishedAt`; nil or empty for none.
    public var stageSchedule: [ManifestStageStep]?
    /// Changes to the live release, oldest first (`PublishRevision`); nil when none.
    public var revisions: [PublishRevision]?
    /// The files derived from this state and what they must hold, sorted by name: what
    /// `PublishRecovery` checks and finishes after a crash. nil in states written before it.
    public var derivedFiles: [DerivedFile]?

    public init(
        app: String, latest: Version, miniVersion: Version, whitelist: [String], rollout: Int,
        networkType: Manifest.NetworkType, expires: String?, versions: [Release], patches: [Patch], fallback: String? = nil
    ) {
        self.app = app
        self.latest = latest
        self.miniVersion = miniVersion
        self.whitelist = whitelist
        self.rollout = rollout
        self.networkType = networkType
        self.expires = expires
        self.versions = versions
        self.patches = patches
        self.fallback = fallback
    }

    /// The name of the state file inside an app directory.
    public static let fileName = "state.json"

    /// The release of `latest`.
    public var latestRelease: Release? { versions.last { $0.version == latest } }
    /// The epoch of `latest` (0 when none): what devices hold as their floor.
    public var epoch: Int { latestRelease?.epochValue ?? 0 }

    // MARK: Reading and writing

    /// Reads `<appDirectory>/state.json`; nil when the app was never published.
    public static func load(appDirectory: String) throws -> PublishState? {
        let path = "\(appDirectory)/\(fileName)"
        guard FileSystem.exists(path) else { return nil }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw PublishError(.publish, "cannot read publish state", path: path)
        }
        return try decode(data, path: path)
    }

    /// Decodes and checks state bytes (`path` only names them in errors).
    public static func decode(_ data: Data, path: String? = nil) throws -> PublishState {
        let state: PublishState
        do {
            state = try JSONDecoder().decode(PublishState.self, from: data)
        } catch {
            throw PublishError(.publish, "publish state is not valid JSON of the expected shape", path: path)
        }
        try state.check(path: path)
        return state
    }

    /// The canonical bytes: sorted keys, pretty, newline-terminated.
    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return try encoder.encode(self) + Data("\n".utf8)
    }

    /// A name a derived file may have: one plain component of letters, digits, `.`, `_`,
    /// `-`, not hidden, not `state.json`, and not a package's or patch's name.
    static func isDerivedName(_ name: String) -> Bool {
        guard (1...255).contains(name.utf8.count), name != fileName, !name.hasPrefix("."),
              name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0)) })
        else { return false }
        return !name.hasSuffix(".zip") && !name.hasSuffix(".zip.gz") && !name.hasSuffix(".bsdiff")
    }

    /// The invariants a server relies on; a state breaking them is refused whole.
    func check(path: String?) throws {
        func fail(_ reason: String) -> PublishError { PublishError(.publish, "invalid publish state: \(reason)", path: path) }
        guard AppName.isValid(app) else { throw fail("invalid app name '\(app)'") }
        guard let last = versions.last, last.version == latest else { throw fail("latest \(latest) is not the last published version") }
        // In publish order (epoch, version) rises; the version names files, so none repeats.
        guard zip(versions, versions.dropFirst()).allSatisfy({ $1.isAfter($0) }) else {
            throw fail("versions are not strictly increasing (by epoch, then version)")
        }
        guard Set(versions.map(\.version.description)).count == versions.count else { throw fail("a version is published twice") }
        if let bad = versions.first(where: { !(0...Manifest.maxEpoch).contains($0.epochValue) }) {
            throw fail("epoch of \(bad.version) is outside 0…\(Manifest.maxEpoch)")
        }
        guard miniVersion <= latest else { throw fail("miniVersion \(miniVersion) is above latest \(latest)") }
        guard (0...100).contains(rollout) else { throw fail("rollout \(rollout) is outside 0…100") }
        if let expires, RFC3339.date(from: expires) == nil { throw fail("expires '\(expires)' is not RFC 3339") }
        if let fallback, !ManifestFields.isPackagePath(fallback) { throw fail("fallback '\(fallback)' is not a normalised relative path") }
        if let publishedAt, RFC3339.date(from: publishedAt) == nil { throw fail("publishedAt '\(publishedAt)' is not RFC 3339") }
        if let stage, !(0...100).contains(stage) { throw fail("stage \(stage) is outside 0…100") }
        if let schedule = stageSchedule, !schedule.isEmpty {
            // The rules devices apply (Manifest.checkStage), so a hand-edited state is never served.
            guard publishedAt != nil else { throw fail("a stage schedule needs publishedAt") }
            guard stage == nil else { throw fail("stage and stageSchedule cannot both be set") }
            if let problem = ManifestStageStep.problem(in: schedule) { throw fail(problem) }
        }
        for release in versions {
            guard release.size >= 0, release.gzipSize >= 0, SHA256Hex.isValid(release.sha256), SHA256Hex.isValid(release.gzipSha256) else {
                throw fail("bad size or hash for \(release.version)")
            }
            if let trial = release.trialLaunches, !(0...Manifest.maxTrialLaunches).contains(trial) {
                throw fail("trialLaunches \(trial) of \(release.version) is outside 0…\(Manifest.maxTrialLaunches)")
            }
        }
        var derivedNames: Set<String> = []
        for file in derivedFiles ?? [] {
            // Names recovery renames into the app directory: plain names of this directory only.
            guard Self.isDerivedName(file.name), derivedNames.insert(file.name).inserted,
                  file.sha256.map(SHA256Hex.isValid) ?? true else {
                throw fail("bad derived file '\(file.name)'")
            }
        }
        for patch in patches {
            guard patch.to == latest, patch.from < latest, versions.contains(where: { $0.version == patch.from }),
                  patch.size >= 0, SHA256Hex.isValid(patch.sha256) else {
                throw fail("bad patch \(patch.from) -> \(patch.to)")
            }
        }
    }
}
