import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The on-disk layout of one agent root and every change to it.
///
/// ```
/// <root>/.lock                       flock for syncs and rollbacks
/// <root>/device-id                   stable random id for the rollout bucket
/// <root>/apps/<app>/current          symlink -> versions/<v>: the single commit point
/// <root>/apps/<app>/versions/<v>/    extracted files of a version
/// <root>/apps/<app>/versions/<v>.json  InstalledVersion, written before activation
/// <root>/apps/<app>/packages/<v>.zip the full package, kept for the next patch (deflated entries)
/// <root>/apps/<app>/packages/<v>.skel or its skeleton: all but the stored files' bytes (PackageSkeleton)
/// <root>/apps/<app>/downloads/       <sha256>[.part] downloads, resumable
/// <root>/apps/<app>/check.json       CheckState (throttle, ETag, Retry-After)
/// <root>/objects/<sha256>[.x]        file objects every version's files are hard links to
/// ```
/// Readers resolve `current` once and keep using that directory; writers only ever
/// add new directories, swap the link with `rename`, and delete under the lock.
public struct Store: Sendable {
    /// The root directory, absolute.
    public let root: String

    /// A store over `root` (made absolute); nothing is read or created until used.
    public init(root: String) {
        self.root = FileSystem.absolute(root)
    }

    func appDirectory(_ app: String) -> String { "\(root)/apps/\(app)" }
    func versionsDirectory(_ app: String) -> String { "\(appDirectory(app))/versions" }
    package func versionDirectory(_ app: String, _ version: Version) -> String { "\(versionsDirectory(app))/\(version)" }
    func metadataPath(_ app: String, _ version: Version) -> String { "\(versionsDirectory(app))/\(version).json" }
    func packagePath(_ app: String, _ version: Version) -> String { "\(appDirectory(app))/packages/\(version).zip" }
    func skeletonPath(_ app: String, _ version: Version) -> String { "\(appDirectory(app))/packages/\(version).skel" }
    func downloadsDirectory(_ app: String) -> String { "\(appDirectory(app))/downloads" }
    func currentLink(_ app: String) -> String { "\(appDirectory(app))/current" }
    func checkStatePath(_ app: String) -> String { "\(appDirectory(app))/check.json" }
    var objectsDirectory: String { "\(root)/objects" }

    /// The apps that have a directory in this root, sorted.
    public func apps() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "\(root)/apps")) ?? []
        return names.filter(AppName.isValid).sorted()
    }

    /// Creates the root and the app's directories.
    package func prepare(_ app: String) throws {
        for dir in [root, "\(root)/apps", appDirectory(app), versionsDirectory(app), "\(appDirectory(app))/packages", downloadsDirectory(app)] {
            do {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            } catch {
                throw OfflineAgentError(.install, "cannot create directory", path: dir, underlying: POSIXFailure("mkdir"))
            }
        }
    }

    // MARK: - Reading

    /// The version the `current` link points at, when it and its record agree; nil when
    /// nothing is installed or the disk disagrees with the record (then a full install repairs it).
    public func active(_ app: String) -> InstalledVersion? {
        guard let version = currentTarget(app), let installed = metadata(app, version),
              installed.version.description == version.description,
              FileSystem.isDirectory(versionDirectory(app, version)) else { return nil }
        return installed
    }

    /// The version the `current` link names, when its record and directory are there: what
    /// a throttled no-op reports. It reads no record (decoding one is a tenth of such a
    /// run), so a record that does not match the link goes unseen until the next check,
    /// whose `active` compares them.
    func linkedVersion(_ app: String) -> Version? {
        guard let version = currentTarget(app), FileSystem.exists(metadataPath(app, version)),
              FileSystem.isDirectory(versionDirectory(app, version)) else { return nil }
        return version
    }

    /// The version the `current` link's target names, read from the link alone.
    private func currentTarget(_ app: String) -> Version? {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: currentLink(app)),
              target.hasPrefix("versions/") else { return nil }
        return Version(String(target.dropFirst("versions/".count)))
    }

    /// True when the app has a `current` link that `active` could not trust.
    func isInconsistent(_ app: String) -> Bool {
        FileSystem.exists(currentLink(app)) && active(app) == nil
    }

    package func metadata(_ app: String, _ version: Version) -> InstalledVersion? {
        guard let data = FileManager.default.contents(atPath: metadataPath(app, version)) else { return nil }
        return try? Self.decoder.decode(InstalledVersion.self, from: data)
    }

    func checkState(_ app: String) -> CheckState {
        guard let data = FileManager.default.contents(atPath: checkStatePath(app)),
              let state = try? Self.decoder.decode(CheckState.self, from: data) else { return CheckState() }
        return state
    }

    func saveCheckState(_ state: CheckState, for app: String) throws {
        try write(state, to: checkStatePath(app))
    }

    /// The size of the package kept for `version`: its zip, or the package its skeleton stands for.
    func keptPackageSize(_ app: String, _ version: Version) -> Int64? {
        FileSystem.fileSize(packagePath(app, version))
            ?? PackageView(skeletonPath: skeletonPath(app, version), objectsDirectory: objectsDirectory)?.size
    }

    // MARK: - Changing (callers hold the RootLock)

    /// Removes what a crashed run left: temporary directories and links, stray versions.
    func cleanLeftovers(_ app: String) {
        for dir in [appDirectory(app), versionsDirectory(app), "\(appDirectory(app))/packages", downloadsDirectory(app)] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where name.hasPrefix(".") {
                FileSystem.remove("\(dir)/\(name)")
            }
        }
    }

    /// Keeps in `downloads/` only what the current plan needs, under the lock.
    ///
    /// With `plan`, that is the files the manifest names (patch and full package,
    /// complete or as a resumable `.part` with its `.part.json`) unless that version is
    /// already installed: partials of versions no longer offered, intermediate products
    /// and strays go. Without a plan (before the manifest is known), names the
    /// downloader never makes and intermediate `.zip` products go.
    func collectDownloads(_ app: String, plan: Manifest?, manifestURL: URL? = nil, installed: Version? = nil) {
        let dir = downloadsDirectory(app)
        let keep: Set<String>? = plan.map { manifest in
            guard manifest.version != installed else { return [] }
            var keys = Set([manifest.sha256, manifest.packageSha256] + [manifest.fullSha256].compactMap { $0 })
            // A partial patch from the `patches` list resumes like the top-level one.
            keys.formUnion(manifest.patches.map(\.sha256))
            // A compressed package without its own hash is kept under a name derived from its URL.
            for url in [manifest.url, manifest.fullUrl].compactMap({ $0 }) {
                if let resolved = URL(string: url, relativeTo: manifestURL)?.absoluteURL {
                    keys.insert(DownloadTarget(url: resolved, size: 0, sha256: nil).key)
                }
            }
            return keys
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] {
            let key = String(name.prefix { $0 != "." })
            let suffix = name.dropFirst(key.count)
            let wellFormed = Self.isDownloadKey(key) && ["", ".part", ".part.json", ".zip"].contains(suffix)
            // `<packageSha256>.zip` is what a patch or a gzip decode made: never reused, remade each time.
            let needed = wellFormed && suffix != ".zip" && (keep?.contains(key) ?? true)
            if !needed { FileSystem.remove("\(dir)/\(name)") }
        }
    }

    /// A name the downloader gives a file: a SHA-256, or `unverified-` and one.
    private static func isDownloadKey(_ key: String) -> Bool {
        let hex = key.hasPrefix("unverified-") ? String(key.dropFirst("unverified-".count)) : key
        return SHA256Hex.isValid(hex)
    }

    /// The bytes `app` keeps on disk, by area.
    ///
    /// Version files are hard links to shared objects: each inode counts once. One whose
    /// links are all in this app's versions (besides its one name in `objects/`) is the
    /// app's alone; one that another app's versions link too is shared.
    public func diskUsage(_ app: String) -> DiskUsage {
        let files = DiskUsage.inodes(under: versionsDirectory(app)).values
        let alone = files.filter { $0.seen >= $0.links - 1 }.reduce(Int64(0)) { $0 + $1.size }
        let versions = files.reduce(Int64(0)) { $0 + $1.size }
        return DiskUsage(
            versions: versions,
            packages: DiskUsage.bytes(under: "\(appDirectory(app))/packages"),
            downloads: DiskUsage.bytes(under: downloadsDirectory(app)),
            total: DiskUsage.bytes(under: appDirectory(app)),
            alone: alone, shared: versions - alone,
            store: DiskUsage.bytes(under: objectsDirectory),
            packageZips: ((try? FileManager.default.contentsOfDirectory(atPath: "\(appDirectory(app))/packages")) ?? [])
                .filter { $0.hasSuffix(".zip") && !$0.hasPrefix(".") }.count)
    }

    /// Points `current` at `version` atomically: a new link under a temp name renamed over the old one.
    package func activate(_ app: String, _ version: Version) throws {
        let dir = appDirectory(app)
        let temp = "\(dir)/.current.tmp-\(UInt64.random(in: 0...UInt64.max))"
        guard symlink("versions/\(version)", temp) == 0 else {
            throw OfflineAgentError(.install, "cannot create link", path: temp, underlying: POSIXFailure("symlink"))
        }
        do {
            try CrashPoint.afterLinkCreated.reached()
            try FileSystem.renameDurably(temp, to: currentLink(app))
        } catch {
            unlink(temp)
            throw OfflineAgentError(.install, "cannot switch the active version", path: currentLink(app), underlying: error as? POSIXFailure)
        }
    }

    /// Rewrites the active version's record, e.g. when a manifest for the same version
    /// changes its rollout, whitelist or miniVersion.
    package func updateRecord(_ installed: InstalledVersion, app: String) throws {
        try write(installed, to: metadataPath(app, installed.version))
    }

    /// Deletes versions other than `keep`, skipping any a reader still holds.
    func collectGarbage(_ app: String, keep: [Version]) {
        let keepNames = Set(keep.map(\.description))
        let versions = versionsDirectory(app)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: versions)) ?? [] where !name.hasPrefix(".") {
            let base = name.hasSuffix(".json") ? String(name.dropLast(5)) : name
            guard !keepNames.contains(base), let version = Version(base) else { continue }
            guard let guardLock = ReaderLock.tryExclusive(metadataPath(app, version)) else { continue }
            // The record goes last, only once the tree is gone: a version whose removal
            // failed keeps its record, and the next collection tries again.
            do {
                try FileSystem.removeTree(versionDirectory(app, version))
                try FileSystem.removeTree(packagePath(app, version))
                try FileSystem.removeTree(skeletonPath(app, version))
                try FileSystem.removeTree(metadataPath(app, version))
            } catch {}
            _ = guardLock
        }
        let packages = "\(appDirectory(app))/packages"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: packages)) ?? [] {
            let base = name.hasSuffix(".zip") ? String(name.dropLast(4)) : name.hasSuffix(".skel") ? String(name.dropLast(5)) : nil
            if let base, !keepNames.contains(base) { FileSystem.remove("\(packages)/\(name)") }
        }
        collectObjects()
    }

    /// Removes the objects no version of any app links any more (and leftovers of a
    /// crashed store). Callers hold the root lock, which every app's install takes.
    func collectObjects() {
        guard FileSystem.isDirectory(objectsDirectory), let objects = try? ObjectStore(root: root) else { return }
        objects.collectGarbage()
    }

    /// Switches back to the version that was active before the current one.
    func rollback(_ app: String) throws -> (from: Version, to: Version) {
        guard let active = active(app) else {
            throw OfflineAgentError(.install, "no active version of '\(app)' to roll back from")
        }
        guard let previous = active.previousVersion, let record = metadata(app, previous),
              FileSystem.isDirectory(versionDirectory(app, previous)) else {
            throw OfflineAgentError(.install, "no previous version of '\(app)' is kept")
        }
        try activate(app, previous)
        // The rolled-back-from version stays kept but is no longer the rollback target.
        var updated = record
        updated.previousVersion = nil
        try updateRecord(updated, app: app)
        return (active.version, previous)
    }

    /// Writes a state record atomically; `durable: false` (an install's version record)
    /// leaves the flush to the install's `syncfs` before its swap.
    func write<T: Encodable>(_ value: T, to path: String, durable: Bool = true) throws {
        do {
            try FileSystem.writeAtomically(try Self.encoder.encode(value), to: path, durable: durable)
        } catch let failure as POSIXFailure {
            let reason = failure.errno == ENOSPC ? "disk full writing state" : "cannot write state"
            throw OfflineAgentError(.install, reason, path: path, underlying: failure)
        }
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "invalid time '\(text)'")
            }
            return date
        }
        return decoder
    }()
}
