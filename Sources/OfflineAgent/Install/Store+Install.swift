import FoundationEssentials

/// How a package becomes a version of the store, in one entry point (`install(_:app:…)`)
/// over an `InstallSource`: a verified package file extracted (`ZipExtractor`), or a
/// streamed patch's objects and skeleton (`PatchedPackageSplitter`), made into a tree of
/// links to the objects, recorded and swapped in by `commit`. Each install is a
/// `Store.transaction`: what it stored is collected if it fails.
///
/// An extension of `Store` kept in `Install/`: the store is the layout and its changes,
/// and names no install type (`scripts/check-layers.sh`).
extension Store {
    /// The package of the installed version as a patch base: the kept zip, or its
    /// skeleton read back through the objects. Not hashed: a damaged object or skeleton
    /// makes the patch's output fail `packageSha256`, and the full package is fetched
    /// (reading the whole package before every patch cost as much as the patch).
    func patchBase(of installed: InstalledVersion, app: String) -> PatchBase? {
        let zip = packagePath(app, installed.version)
        if FileSystem.fileSize(zip) != nil { return .file(zip) }
        return PackageView(skeletonPath: skeletonPath(app, installed.version), objectsDirectory: objectsDirectory).map(PatchBase.view)
    }

    /// What installing the package file `package` is expected to write: the bytes of its
    /// entries that the installed version's package does not have (same CRC-32 and size:
    /// its object is taken to be stored), plus its headers (the skeleton's share). The
    /// central directories are all that is read. Without a readable central directory,
    /// the package's size.
    func bytesToInstall(package: String, app: String, installed: InstalledVersion?) -> Int64 {
        guard let entries = try? ZipCentralDirectory.entries(of: package), let size = FileSystem.fileSize(package) else {
            return FileSystem.fileSize(package) ?? 0
        }
        var stored = Set<UInt64>()
        if let installed, let base = patchBase(of: installed, app: app) {
            let old: [ZipCentralDirectory.Entry]?
            switch base {
            case .file(let path): old = try? ZipCentralDirectory.entries(of: path)
            case .view(let view): old = try? view.centralDirectory()
            }
            for entry in old ?? [] { stored.insert(UInt64(entry.crc32) << 32 | UInt64(entry.size)) }
        }
        var data: Int64 = 0, lacking: Int64 = 0
        for entry in entries {
            data += Int64(entry.compressedSize)
            if !stored.contains(UInt64(entry.crc32) << 32 | UInt64(entry.size)) { lacking += Int64(entry.size) }
        }
        return lacking + max(0, size - data)
    }

    // MARK: - Installing (callers hold the RootLock)

    /// Makes `manifest.version` from `source`, records it, and makes it active: the one
    /// way a package becomes a version. One transaction: whatever a failing step stored
    /// is collected, and the active version is untouched until the swap.
    /// - Parameter notice: receives the log line of a fallback (files copied, not linked).
    func install(
        _ source: InstallSource, app: String, packageSha256: String, manifest: Manifest, via: UpdateMethod,
        limits: ExtractionLimits, trialLaunches: Int = 0, notice: (String) -> Void = { _ in }
    ) throws -> InstalledVersion {
        try transaction { transaction in
            let previous = active(app)
            let version = manifest.version
            let target = versionDirectory(app, version)
            if case .streamed(let splitter, _) = source, let damage = splitter.damage {
                // Refused before any tree.
                throw OfflineAgentError(.extract, damage, cause: .archiveCorrupt, path: "patched package of \(version)")
            }
            // A directory of this version that isn't active is a leftover: replace it.
            FileSystem.remove(target)
            FileSystem.remove(metadataPath(app, version))
            let installed: InstalledVersion
            do {
                let keep = switch source {
                case .archive(let package): try extract(package, app: app, version: version, target: target, limits: limits, notice: notice)
                case .streamed(let splitter, let objects):
                    try makeTree(streamed: splitter, objects: objects, app: app, version: version, target: target, limits: limits, notice: notice)
                }
                try CrashPoint.afterExtract.reached()
                installed = try commit(app: app, version: version, previous: previous, packageSha256: packageSha256, manifest: manifest,
                                       via: via, trialLaunches: trialLaunches, target: target, keep: keep)
            } catch {
                // A streamed package's skeleton is a dot file until it is kept: it goes with the failed install.
                FileSystem.remove(streamedSkeletonPath(app, version))
                throw error
            }
            transaction.commit()
            return installed
        }
    }

    /// Extracts `package` into `target`; returns how to keep it once the tree is in place:
    /// its skeleton when every stored file's bytes are linked objects, else the zip.
    private func extract(
        _ package: String, app: String, version: Version, target: String, limits: ExtractionLimits, notice: (String) -> Void
    ) throws -> () throws -> Void {
        let summary: ExtractionSummary
        let linkedAll: Bool
        do {
            // Without an object store (it cannot even be created), extraction writes plain files as before.
            let objects = try? ObjectStore(root: root)
            // Not flushed here: `commit` flushes the whole install once, before the swap.
            summary = try ZipExtractor.extract(
                archive: URL(fileURLWithPath: package), to: URL(fileURLWithPath: target), limits: limits, durable: false, objects: objects)
            if let objects {
                noticeCopies(objects, app: app, version: version, notice: notice)
            } else {
                notice("\(app): no object store under \(root): version \(version) written as plain files")
            }
            linkedAll = objects != nil && objects?.copiedInsteadOfLinking == false
        } catch {
            if let refused = error as? OfflineAgentError, refused.cause == .hostileArchive || refused.cause == .archiveCorrupt,
               FileSystem.parent(of: package) == downloadsDirectory(app) {
                // A refused package would only be refused again: it must not stay in downloads/.
                FileSystem.remove(package)
            }
            throw error
        }
        let kept = packagePath(app, version)
        return {
            guard package != kept else { return }
            FileSystem.remove(kept)
            FileSystem.remove(skeletonPath(app, version))
            // Every stored file's bytes are objects now: keep only the rest of the zip.
            // A package with deflated entries (or files copied, not linked) keeps its zip.
            let skeleton = linkedAll
                && (try? PackageSkeleton.write(of: package, objectNames: summary.objectNames, to: skeletonPath(app, version))) == true
            if skeleton {
                FileSystem.remove(package)
            } else {
                try FileSystem.renameAtomically(package, to: kept, durable: false)
            }
        }
    }

    /// Makes `target` from a streamed patch's output: its skeleton is written and read
    /// back as the package, whose central directory goes through the extractor's checks
    /// before any tree exists; the tree is links to the objects the stream stored.
    /// Returns how to keep the skeleton as the next patch's base.
    private func makeTree(
        streamed splitter: PatchedPackageSplitter, objects: ObjectStore, app: String, version: Version, target: String,
        limits: ExtractionLimits, notice: (String) -> Void
    ) throws -> () throws -> Void {
        let described = "patched package of \(version)"
        let streamedSkeleton = streamedSkeletonPath(app, version)
        let segments = splitter.segments.map { ($0.start, $0.length, $0.object?.name) }
        do {
            try PackageSkeleton.write(size: splitter.size, segments: segments, skeletonBytes: splitter.skeletonBytes, to: streamedSkeleton)
        } catch {
            throw OfflineAgentError(.install, "cannot write the skeleton of \(version)", path: streamedSkeleton, underlying: error as? POSIXFailure)
        }
        try CrashPoint.afterPatchVerified.reached()
        guard let view = PackageView(skeletonPath: streamedSkeleton, objectsDirectory: objectsDirectory) else {
            throw OfflineAgentError(.install, "cannot read back the skeleton of \(version)", path: streamedSkeleton)
        }
        let made = try ZipExtractor.makeTree(view: view, objectsByOffset: splitter.objectsByOffset, path: described, to: target,
                                             limits: limits, objects: objects)
        noticeCopies(objects, app: app, version: version, notice: notice)
        return {
            FileSystem.remove(packagePath(app, version))
            let final = splitter.segments.map { ($0.start, $0.length, $0.object.map { made.namesByOffset[$0.headerOffset] ?? $0.name }) }
            if final.map(\.2) == segments.map(\.2) {
                try FileSystem.renameAtomically(streamedSkeleton, to: skeletonPath(app, version), durable: false)
            } else {
                // Executable entries link `.x` objects: the kept skeleton names those, which the versions keep alive.
                FileSystem.remove(streamedSkeleton)
                try PackageSkeleton.write(size: splitter.size, segments: final, skeletonBytes: splitter.skeletonBytes, to: skeletonPath(app, version))
            }
        }
    }

    /// Where a streamed package's skeleton waits for its tree: a dot name, which a crash
    /// leaves to `cleanLeftovers` and a failure removes at once.
    private func streamedSkeletonPath(_ app: String, _ version: Version) -> String {
        "\(appDirectory(app))/packages/.\(version).skel.streamed"
    }

    private func noticeCopies(_ objects: ObjectStore, app: String, version: Version, notice: (String) -> Void) {
        if objects.copiedInsteadOfLinking {
            notice("\(app): hard links to \(objectsDirectory) failed (another file system, or none supported): files of \(version) copied instead")
        }
    }

    /// What every install does once the tree is in place: keep the package (`keep`),
    /// write the record, flush the file system, swap `current`, collect what no kept
    /// version needs.
    private func commit(
        app: String, version: Version, previous: InstalledVersion?, packageSha256: String, manifest: Manifest, via: UpdateMethod,
        trialLaunches: Int, target: String, keep: @escaping () throws -> Void
    ) throws -> InstalledVersion {
        do {
            try keep()
            try CrashPoint.afterKeepPackage.reached()
            let installed = InstalledVersion(
                version: version, packageSha256: packageSha256, miniVersion: manifest.miniVersion,
                whitelist: manifest.whitelist, rollout: manifest.rollout, installedAt: Date(), via: via,
                previousVersion: previous?.version, fallback: manifest.fallback,
                trialLaunches: trialLaunches > 0 ? trialLaunches : nil)
            try write(installed, to: metadataPath(app, version), durable: false)
            try CrashPoint.afterRecord.reached()
            // One flush of everything the install wrote (objects, tree, skeleton or kept zip,
            // record: none of them fsync'd on its own) before the swap makes it the version:
            // nothing is active that is not on disk, and what a power cut before it leaves is
            // a version that is not active, replaced by the next install of it. A package file
            // removed before it (its skeleton kept) never reaches the disk.
            try FileSystem.syncFilesystem(containing: target)
            try activate(app, version)
            try CrashPoint.afterSwap.reached()
            collectGarbage(app, keep: [version, previous?.version].compactMap { $0 })
            try CrashPoint.afterGarbageCollection.reached()
            return installed
        } catch let error as OfflineAgentError {
            throw error
        } catch {
            throw OfflineAgentError(.install, "cannot install \(version)", path: target, underlying: error as? POSIXFailure)
        }
    }
}
