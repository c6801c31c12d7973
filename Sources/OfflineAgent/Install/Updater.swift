import FoundationEssentials
import Logging

/// One update of one app from a validated manifest: plan (patch or full, disk
/// budget), download, patch with fallback to the full package, verify, install.
/// Runs under the root lock; any failure leaves the active version as it was.
/// Patching, hashing, decompression and extraction run on `pool`, off the cooperative pool.
struct Updater: Sendable {
    let store: Store
    let app: String
    let manifest: Manifest
    let manifestURL: URL
    let installed: InstalledVersion?
    let fetcher: HTTPFetcher
    let configuration: AgentConfiguration
    let logger: Logger
    let progress: @Sendable (ProgressEvent) -> Void
    let pool: BlockingPool
    /// Counts every package byte received, also by a sync that then fails.
    var counter = ByteCounter()
    /// `SyncOptions.allowedOrigins`, checked again under `OriginClaims.installing` as the version is installed.
    var allowedOrigins: [String]? = nil

    struct Outcome {
        var installed: InstalledVersion
        var bytesDownloaded: Int64
        var patchFallbackReason: String?
    }

    private var downloader: Downloader { Downloader(fetcher: fetcher, directory: store.downloadsDirectory(app), pool: pool, counter: counter) }

    /// Where a verified package waits for its install: the downloader's name for a file
    /// whose hash is `packageSha256`. A local failure (disk full, a kill) leaves it there
    /// and the downloads GC keeps it while the manifest names it, so the next run installs it.
    private var verifiedPath: String { "\(store.downloadsDirectory(app))/\(manifest.packageSha256)" }

    /// The patch for the installed version: the top-level one or a `patches` entry.
    private var patchOffer: ManifestPatch? { manifest.patch(from: installed?.version) }

    func run() async throws -> Outcome {
        if let refused = RefusedPackages.load(store, app: app).match(manifest) {
            throw OfflineAgentError(
                refused.phase,
                "package \(manifest.packageSha256) was refused before (\(refused.cause.rawValue): \(refused.reason)); not downloaded again until the manifest offers other bytes",
                cause: refused.cause)
        }
        try checkDeclaredSizes()
        if let kept = try await reusablePackage() {
            let record = try await install(.file(kept), via: patchOffer != nil ? .patch : .full)
            return Outcome(installed: record, bytesDownloaded: counter.value, patchFallbackReason: nil)
        }
        var fallbackReason: String?
        var patchHashMismatch = false
        // A top-level patch from another base still goes this way: its refusal is the fallback reason.
        if manifest.isPatch || patchOffer != nil {
            do {
                let package = try await viaPatch(patchOffer)
                let record = try await install(package, via: .patch)
                return Outcome(installed: record, bytesDownloaded: counter.value, patchFallbackReason: nil)
            } catch let error as OfflineAgentError where (error.code == .patch || error.code == .download) && error.cause != .cancelled {
                // Corrupt bytes, a wrong or damaged base, a 404: the full package still gets us there.
                // (A damaged base is `.patch` with cause `.io`: not the publisher's mismatch below.)
                // Reported in SyncReport.patchFallbackReason (and the CLI's line); a log only with --verbose.
                logger.notice("\(app): patch unusable (\(error)); falling back to the full package")
                fallbackReason = error.description
                patchHashMismatch = error.code == .patch && error.cause == .hashMismatch
            }
        }
        let package: String
        do {
            package = try await viaFull()
        } catch let error as OfflineAgentError where patchHashMismatch && error.cause == .hashMismatch {
            // Both ways to these bytes fail their hash: what is published is wrong, not the transfer.
            let (store, app, manifest) = (self.store, self.app, self.manifest)
            _ = try? await pool.run(.download, cancellable: false) {
                RefusedPackages.remember(store, app: app, manifest: manifest, error: error, fileHashBound: true)
            }
            throw error
        }
        let record = try await install(.file(package), via: .full)
        return Outcome(installed: record, bytesDownloaded: counter.value, patchFallbackReason: fallbackReason)
    }

    /// The verified package a failed earlier run left in downloads/, hashed again
    /// (the disk may have altered it); one that no longer matches is deleted.
    private func reusablePackage() async throws -> String? {
        let path = verifiedPath
        guard FileSystem.fileSize(path) != nil else { return nil }
        let digest = try await pool.run(.install) { try? FileHasher.sha256(of: path) }
        guard digest == manifest.packageSha256 else {
            logger.notice("\(app): kept package \(path) no longer matches packageSha256; downloading again")
            FileSystem.remove(path)
            return nil
        }
        // Its disk check (what extraction writes) is the install's (`checkSpaceToInstall`).
        return path
    }

    // MARK: - Patch

    /// A patched package ready to install: a verified file in `downloads/`, or the
    /// streamed output already split into the store's objects and a skeleton.
    enum PatchedPackage: Sendable {
        case file(String)
        /// With the patch it came from, kept in `downloads/` until the install is done:
        /// a run killed meanwhile streams it again without a download (the objects are there).
        case streamed(PatchedPackageSplitter, ObjectStore, patch: String)
    }

    private func viaPatch(_ offer: ManifestPatch?) async throws -> PatchedPackage {
        guard let installed, let offer else {
            throw OfflineAgentError(.patch, "patch is from \(manifest.baseVersion?.description ?? "?"), installed is \(installed?.version.description ?? "nothing")")
        }
        let store = self.store, app = self.app
        // Not hashed here: the output's check against packageSha256 catches a damaged base
        // (and then `baseDamage` tells it from a bad patch), without reading the whole package first.
        guard let old = try await pool.run(.patch, { store.patchBase(of: installed, app: app) }) else {
            throw OfflineAgentError(.patch, "kept package of \(installed.version) is missing or altered")
        }
        let objects: ObjectStore? = if case .view = old { try? ObjectStore(root: store.root) } else { nil }
        if objects != nil {
            // Streamed into the store: the patch, the skeletons (the old one's size as the
            // estimate, twice: the one made, and its rewrite when entries are executable);
            // each new object's bytes are checked against the free space as it is written.
            let skeleton = FileSystem.fileSize(store.skeletonPath(app, installed.version)) ?? 0
            try checkDiskSpace(needed: try Self.sum(offer.size, try Self.product(skeleton, 2)))
        } else {
            // Patch + the new package (about the old one's size) + its extraction.
            try checkDiskSpace(needed: try Self.sum(offer.size, try Self.product(packageEstimate(old), 2)))
        }
        let target = try self.target(url: offer.url, size: offer.size, sha256: offer.sha256)
        let patch = try await download(target)
        do {
            let patched = try await apply(patch, to: old, installed: installed, objects: objects)
            if case .file = patched { FileSystem.remove(patch) }
            return patched
        } catch let error as OfflineAgentError where error.code == .patch {
            // The patch, or what it makes, is wrong: not worth keeping. A local failure keeps it.
            FileSystem.remove(patch)
            throw error
        }
    }

    private func apply(_ patch: String, to old: PatchBase, installed: InstalledVersion, objects: ObjectStore?) async throws -> PatchedPackage {
        progress(ProgressEvent(app: app, phase: .patching, completed: 0, total: 0))
        let expected: Int64? = manifest.compression == .none ? manifest.fullFile.size : nil
        let maxPackageBytes = configuration.maxPackageBytes
        let newSize = try await pool.run(.patch) {
            // The header's new size is the patch author's word: over the cap, the patch is not worth applying.
            let newSize = try Patcher.header(of: URL(fileURLWithPath: patch)).newSize
            guard newSize <= maxPackageBytes else {
                throw OfflineAgentError(
                    .patch, "patch would produce \(newSize) bytes, above the cap of \(maxPackageBytes)",
                    cause: .tooLarge, path: patch)
            }
            return newSize
        }
        if case .view(let view) = old, let objects {
            if let streamed = try await streamed(view: view, objects: objects, patch: patch, expected: expected, newSize: newSize, installed: installed) {
                return streamed
            }
            // Not a plain stored zip: the whole patched zip, then extraction, as below.
            try checkDiskSpace(needed: try Self.product(packageEstimate(old), 2))
        }
        let output = "\(store.downloadsDirectory(app))/\(manifest.packageSha256).zip"
        try await pool.run(.patch) { try old.apply(patch: patch, to: output, expectedSize: expected) }
        try CrashPoint.afterPatch.reached()
        return .file(try await pool.run(.patch) {
            let digest = try FileHasher.sha256(of: output)
            guard digest == manifest.packageSha256 else {
                FileSystem.remove(output)
                throw baseDamage(old, installed: installed)
                    ?? OfflineAgentError(.patch, "patched package hashes to \(digest), expected \(manifest.packageSha256)", cause: .hashMismatch)
            }
            return try keepVerified(output)
        })
    }

    /// Streams the patch's output into the store (`PatchedPackageSplitter`) and checks its
    /// size and hash; nil when the output is not a plain stored zip (the caller then
    /// takes the file path). Nothing is installed here.
    private func streamed(
        view: PackageView, objects: ObjectStore, patch: String, expected: Int64?, newSize: Int64, installed: InstalledVersion
    ) async throws -> PatchedPackage? {
        let manifest = self.manifest, app = self.app, logger = self.logger, store = self.store
        let reserve = max(0, configuration.diskReserveBytes), maxEntries = configuration.extractionLimits.maxEntries
        return try await pool.run(.patch) { () throws -> PatchedPackage? in
            let candidates = view.entryObjects()
            let splitter = PatchedPackageSplitter(objects: objects, reserve: reserve, candidates: candidates, packageSize: newSize,
                                                  maxEntries: maxEntries)
            // The objects the stream stores are the install's only once it verified them
            // (`.streamed`): any other way out collects them now, under the root lock, or a
            // refused file path would leave them until the next install.
            return try store.transaction { transaction in
                do {
                    try Patcher.apply(view: view, patch: URL(fileURLWithPath: patch), into: splitter, expectedSize: expected)
                    guard splitter.endedCleanly else {
                        // Ends inside an entry or a header: let the file path and libzip judge it.
                        logger.notice("\(app): patched package does not end with a central directory; writing it whole")
                        return nil
                    }
                    splitter.finish()
                    try CrashPoint.afterPatch.reached()
                    let digest = splitter.sha256()
                    guard expected == nil || splitter.size == expected, digest == manifest.packageSha256 else {
                        throw baseDamage(.view(view), installed: installed)
                            ?? OfflineAgentError(.patch, "patched package (\(splitter.size) bytes) hashes to \(digest), expected \(manifest.packageSha256)", cause: .hashMismatch)
                    }
                    transaction.commit()
                    return .streamed(splitter, objects, patch: patch)
                } catch let error as OfflineAgentError where (error.underlying as? PatchFailure)?.status == PatchFailure.stopped {
                    guard case .notPlain(let why)? = splitter.stop else {
                        if case .failure(let failure)? = splitter.stop {
                            throw failure as? OfflineAgentError
                                ?? OfflineAgentError(.install, "cannot store the patched package's files", cause: ZipExtractor.writeCause(failure as? POSIXFailure),
                                                     path: objects.directory, underlying: failure as? POSIXFailure)
                        }
                        throw error
                    }
                    logger.notice("\(app): patched package is not a plain stored zip (\(why)); writing it whole")
                    return nil
                }
            }
        }
    }

    /// After a patch's output failed its hash: whether the installed package it was applied
    /// to is what was installed. Read only now, once, instead of before every patch.
    private func baseDamage(_ base: PatchBase, installed: InstalledVersion) -> OfflineAgentError? {
        guard (try? base.sha256()) != installed.packageSha256 else { return nil }
        return OfflineAgentError(.patch, "kept package of \(installed.version) no longer hashes to what was installed (a damaged object or skeleton)", cause: .io)
    }

    private func packageEstimate(_ old: PatchBase) -> Int64 {
        max(old.size, manifest.compression == .none ? manifest.fullFile.size : 0)
    }

    // MARK: - Full

    private func viaFull() async throws -> String {
        let (url, size, sha256) = manifest.fullFile
        let compressed = manifest.compression == .gzip
        // A gzip package expands: estimate 4× its size, or the installed package's size if larger.
        let packageEstimate = compressed
            ? max(try Self.product(size, 4), installed.flatMap { store.keptPackageSize(app, $0.version) } ?? 0)
            : size
        // The download (and a gzip's output); what extraction writes is checked once the
        // central directory is known (`checkSpaceToInstall`).
        try checkDiskSpace(needed: try Self.sum(size, compressed ? packageEstimate : 0))
        // An uncompressed package is the file itself: without its own hash, packageSha256 checks it.
        let fileHash = sha256 ?? (compressed ? nil : manifest.packageSha256)
        let file = try await download(try target(url: url, size: size, sha256: fileHash))
        if !compressed, fileHash == manifest.packageSha256 { return file }  // already verified while streaming
        return try await pool.run(.download) { try unpackIfNeeded(file) }
    }

    private func unpackIfNeeded(_ file: String) throws -> String {
        guard manifest.compression == .gzip else {
            let digest = try FileHasher.sha256(of: file)
            guard digest == manifest.packageSha256 else {
                FileSystem.remove(file)
                throw OfflineAgentError(.download, "package hashes to \(digest), expected packageSha256 \(manifest.packageSha256)", cause: .hashMismatch)
            }
            return file
        }
        let output = "\(store.downloadsDirectory(app))/\(manifest.packageSha256).zip"
        let digest = try GzipDecoder.decode(file, to: output, maxOutputBytes: configuration.maxPackageBytes)
        FileSystem.remove(file)
        guard digest == manifest.packageSha256 else {
            FileSystem.remove(output)
            throw OfflineAgentError(.download, "decompressed package hashes to \(digest), expected \(manifest.packageSha256)", cause: .hashMismatch)
        }
        return try keepVerified(output)
    }

    // MARK: - Shared steps

    private func target(url: String, size: Int64, sha256: String?) throws -> DownloadTarget {
        guard let resolved = URL(string: url, relativeTo: manifestURL)?.absoluteURL,
              WebAddress.webScheme(resolved.scheme) != nil else {
            throw OfflineAgentError(.manifest, "invalid file URL '\(url)'", cause: .manifestInvalid)
        }
        guard size >= 0, size <= configuration.maxPackageBytes else {
            throw OfflineAgentError(.download, "file of \(size) bytes exceeds the cap of \(configuration.maxPackageBytes)",
                                    cause: .tooLarge, path: resolved.absoluteString)
        }
        return DownloadTarget(url: resolved, size: size, sha256: sha256)
    }

    /// Gives a verified intermediate (`<packageSha256>.zip`) the name a failed install is reused under.
    private func keepVerified(_ output: String) throws -> String {
        do {
            try FileSystem.renameDurably(output, to: verifiedPath)
        } catch {
            FileSystem.remove(output)
            throw OfflineAgentError(.install, "cannot keep the verified package", cause: .io, path: verifiedPath, underlying: error as? POSIXFailure)
        }
        return verifiedPath
    }

    private func download(_ target: DownloadTarget) async throws -> String {
        let app = self.app
        let progress = self.progress
        progress(ProgressEvent(app: app, phase: .downloading, completed: 0, total: target.size))
        let (path, _) = try await downloader.fetch(target) { done, total, resumedFrom in
            progress(ProgressEvent(app: app, phase: .downloading, completed: done, total: total, resumedFrom: resumedFrom))
        }
        try CrashPoint.afterDownload.reached()
        return path
    }

    private func checkDiskSpace(needed: Int64) throws {
        let dir = store.downloadsDirectory(app)
        guard let available = FileSystem.availableBytes(at: dir) else { return }
        let required = try Self.sum(needed, max(0, configuration.diskReserveBytes))
        guard available >= required else {
            throw OfflineAgentError(.install, "not enough disk space: the update needs \(required) bytes, \(available) are free",
                                    cause: .diskFull, path: dir)
        }
    }

    /// Every size the manifest declares against the cap, before any file is requested:
    /// a full fallback that could never be taken must not cost a patch download first.
    private func checkDeclaredSizes() throws {
        let cap = configuration.maxPackageBytes
        var declared: [(field: String, size: Int64, url: String)] = [("size", manifest.size, manifest.url)]
        if manifest.isPatch, let fullSize = manifest.fullSize { declared.append(("fullSize", fullSize, manifest.fullUrl ?? "")) }
        // Only the patch this device would take: other bases' entries are never requested here.
        if let offer = patchOffer { declared.append(("the patch from \(offer.baseVersion): size", offer.size, offer.url)) }
        for (field, size, url) in declared where size < 0 || size > cap {
            throw OfflineAgentError(.download, "\(field) of \(size) bytes exceeds the cap of \(cap)", cause: .tooLarge, path: url)
        }
    }

    /// Disk-budget arithmetic on declared sizes: an overflow is an absurd size, not a crash.
    private static func sum(_ terms: Int64...) throws -> Int64 {
        try terms.reduce(0) { total, term in
            let (result, overflow) = total.addingReportingOverflow(term)
            guard !overflow else { throw OfflineAgentError(.download, "the update's sizes add up past \(Int64.max) bytes", cause: .tooLarge) }
            return result
        }
    }

    private static func product(_ size: Int64, _ factor: Int64) throws -> Int64 {
        let (result, overflow) = size.multipliedReportingOverflow(by: factor)
        guard !overflow else { throw OfflineAgentError(.download, "\(size) bytes × \(factor) overflows", cause: .tooLarge) }
        return result
    }

    /// Before extracting a package file: the bytes of the entries the store is likely to
    /// lack, from the central directory (an entry whose CRC-32 and size an entry of the
    /// installed package has is taken as stored), plus its skeleton's share.
    private func checkSpaceToInstall(_ package: String) throws {
        let needed = store.bytesToInstall(package: package, app: app, installed: installed)
        try checkDiskSpace(needed: needed)
    }

    private func install(_ package: PatchedPackage, via: UpdateMethod) async throws -> InstalledVersion {
        progress(ProgressEvent(app: app, phase: .extracting, completed: 0, total: 0))
        let logger = self.logger
        // The disk check (central directories), extraction, syncfs, the swap and the collection of old versions: all blocking.
        let record = try await pool.run(.extract) {
            if case .file(let path) = package { try checkSpaceToInstall(path) }
            // The claim is checked and made (the swap) in one step: a batch's other syncs wait.
            return try OriginClaims.claim(app: app, whitelist: manifest.whitelist, allowed: allowedOrigins, store: store) {
            do {
                let trial = configuration.maxTrialLaunches ?? manifest.trialLaunches ?? 0
                let (source, patch): (InstallSource, String?) = switch package {
                case .file(let path): (.archive(path), nil)
                case .streamed(let splitter, let objects, let patch): (.streamed(splitter, objects), patch)
                }
                let record = try store.install(
                    source, app: app, packageSha256: manifest.packageSha256, manifest: manifest, via: via,
                    limits: configuration.extractionLimits, trialLaunches: trial, notice: { logger.notice("\($0)") })
                if let patch { FileSystem.remove(patch) }
                return record
            } catch let error as OfflineAgentError where error.cause == .hostileArchive || error.cause == .archiveCorrupt {
                // Verified bytes the extractor refuses are refused on every device and every run.
                RefusedPackages.remember(store, app: app, manifest: manifest, error: error, fileHashBound: false)
                if case .streamed(_, _, let patch) = package { FileSystem.remove(patch) }
                throw error
            }
            }
        }
        progress(ProgressEvent(app: app, phase: .installing, completed: 1, total: 1))
        return record
    }
}
