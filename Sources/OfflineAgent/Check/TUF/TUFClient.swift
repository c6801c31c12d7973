import AsyncHTTPClient
import FoundationEssentials
import NIOCore

/// The specification's detailed client workflow (5.2 to 5.7), one step after the
/// other as python-tuf's `ngclient.Updater` runs it: load the trusted root, walk the
/// root chain, then timestamp, snapshot and targets, then download a target by its
/// hash-prefixed name and check its length and hashes.
///
/// The repository is `<base>/`, its metadata `<base>/metadata/`. Every download is
/// capped: by the length the metadata gives, else by ngclient's defaults.
struct TUFClient: Sendable {
    /// ngclient's defaults (`UpdaterConfig`).
    static let maxRootRotations = 32
    static let rootCap: Int64 = 512_000
    static let timestampCap: Int64 = 16_384
    static let snapshotCap: Int64 = 2_000_000
    static let targetsCap: Int64 = 5_000_000

    let fetcher: HTTPFetcher
    /// The repository's base URL, ending in `/`.
    let repository: URL
    let store: TUFMetadataStore
    /// The configured root: trusted only until the persisted root is as new.
    let bootstrap: [UInt8]
    let now: Date

    /// Steps 5.2 to 5.6: the trusted metadata after this refresh, persisted.
    func refresh() async throws -> TUFTrustedSet {
        // 5.2: the persisted root, unless the configured one is newer (a root shipped in a config push).
        var set = try TUFTrustedSet(root: bootstrap, now: now)
        if let persisted = store.read("root"), let local = try? TUFTrustedSet(root: persisted, now: now),
           local.root.metadata.version >= set.root.metadata.version {
            set = local
        }
        // 5.3: N+1 until the repository has none; each version signed by the old and the new keys.
        for _ in 0..<Self.maxRootRotations {
            let version = set.root.metadata.version + 1
            guard let bytes = try await download("metadata/\(version).root.json", cap: Self.rootCap, missingIsNil: true) else { break }
            if try set.updateRoot(bytes) {
                // 5.3.11: new timestamp or snapshot keys: the old versions say nothing any more
                // (fast-forward recovery: a repository can restart their versions). Removed
                // before the new root is kept: a crash between the two finds the old root
                // and rotates again, never the new root with the old floor.
                store.remove("timestamp")
                store.remove("snapshot")
            }
            try store.write("root", bytes)
            CrashPoint.afterTUFRoot.hit()
        }
        // 5.4: the persisted timestamp is the floor (it may have expired: it still is).
        if let local = store.read("timestamp") { _ = try? set.updateTimestamp(local) }
        let timestamp = try await download("metadata/timestamp.json", cap: Self.timestampCap)
        if try set.updateTimestamp(timestamp) {
            try store.write("timestamp", timestamp)
            CrashPoint.afterTUFTimestamp.hit()
        }
        guard let snapshotMeta = set.timestamp?.snapshot else { throw TUFKey.invalid("no trusted timestamp") }

        // 5.5: the persisted snapshot when it is still the one timestamp names.
        var haveSnapshot = false
        if let local = store.read("snapshot") {
            haveSnapshot = (try? set.updateSnapshot(local, trusted: true)) != nil
        }
        if !haveSnapshot {
            let name = set.root.consistentSnapshot ? "\(snapshotMeta.version).snapshot.json" : "snapshot.json"
            let bytes = try await download("metadata/\(name)", cap: snapshotMeta.length ?? Self.snapshotCap)
            try set.updateSnapshot(bytes)
            try store.write("snapshot", bytes)
            CrashPoint.afterTUFSnapshot.hit()
        }
        // 5.6: likewise targets.
        if let local = store.read("targets"), (try? set.updateTargets(local)) != nil { return set }
        guard let targetsMeta = set.snapshot?.meta["targets.json"] else { throw TUFKey.invalid("snapshot does not name targets.json") }
        let name = set.root.consistentSnapshot ? "\(targetsMeta.version).targets.json" : "targets.json"
        let bytes = try await download("metadata/\(name)", cap: targetsMeta.length ?? Self.targetsCap)
        try set.updateTargets(bytes)
        try store.write("targets", bytes)
        CrashPoint.afterTUFTargets.hit()
        return set
    }

    /// 5.7: the target at `path`, fetched by its hash-prefixed name when the repository
    /// is consistent, checked against its length and hashes.
    ///
    /// - Throws: `target-unlisted` when trusted targets do not list it, `length-exceeded`
    ///   or `hash-mismatch` when the bytes are not the ones listed.
    func target(_ path: String, in set: TUFTrustedSet) async throws -> [UInt8] {
        guard let info = set.targets?.targets[path] else {
            throw OfflineAgentError(.manifest, "\(path) is not a target of targets v\(set.targets?.metadata.version ?? 0)", cause: .targetUnlisted)
        }
        var name = path
        if set.root.consistentSnapshot, let hash = info.sha256 {
            let slash = path.lastIndex(of: "/")
            name = slash.map { "\(path[...$0])\(hash).\(path[path.index(after: $0)...])" } ?? "\(hash).\(path)"
        }
        let bytes: [UInt8] = try await download(name, cap: info.length)
        try TUFTargetFile.check(bytes, length: info.length, hashes: info.hashes, name: path)
        return bytes
    }

    private func download(_ name: String, cap: Int64) async throws -> [UInt8] {
        try await download(name, cap: cap, missingIsNil: false) ?? []
    }

    /// GETs `<repository>/name`, reading at most `cap` bytes. `missingIsNil`: a 404 or
    /// 403 is nil (the end of the root chain, as ngclient reads it).
    private func download(_ name: String, cap: Int64, missingIsNil: Bool) async throws -> [UInt8]? {
        guard let url = URL(string: repository.absoluteString + name) else {
            throw OfflineAgentError(.manifest, "invalid repository URL", cause: .usage, path: repository.absoluteString + name)
        }
        let (response, _) = try await fetcher.get(url, headers: [], phase: .manifest, timeout: fetcher.settings.manifestTimeout)
        if missingIsNil, response.status.code == 404 || response.status.code == 403 { return nil }
        guard response.status.code == 200 else {
            throw OfflineAgentError(.manifest, "server answered \(response.status.code)", cause: .manifestUnavailable, path: url.absoluteString)
        }
        if let length = response.headers.first(name: "Content-Length").flatMap(Int64.init), length > cap {
            throw OfflineAgentError(.manifest, "\(name) of \(length) bytes exceeds its \(cap)-byte limit", cause: .lengthExceeded, path: url.absoluteString)
        }
        var data: [UInt8] = []
        do {
            for try await chunk in response.body {
                guard Int64(data.count) + Int64(chunk.readableBytes) <= cap else {
                    throw OfflineAgentError(.manifest, "\(name) exceeds its \(cap)-byte limit", cause: .lengthExceeded, path: url.absoluteString)
                }
                data.append(contentsOf: chunk.readableBytesView)
            }
        } catch let error as OfflineAgentError {
            throw error
        } catch {
            let failure = HTTPFetcher.failure(error, phase: .manifest, url: url)
            throw OfflineAgentError(.manifest, "reading \(name) failed: \(failure.reason)", cause: failure.cause, path: url.absoluteString)
        }
        return data
    }
}
