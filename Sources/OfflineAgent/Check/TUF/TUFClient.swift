import AsyncHTTPClient
import FoundationEssentials
import NIOCore

/// The specification's detailed client workflow (5.2 to 5.7), one step after the
/// other as python-tuf's `ngclient.Updater` runs it: load the trusted root, walk the
/// root chain, then timestamp, snapshot and targets, then search the target through
/// the delegations, download it by its hash-prefixed name and check its length and hashes.
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
    /// At most this many delegated roles are visited searching one target (`max_delegations`).
    static let maxDelegations = 32

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
        let local = store.read("timestamp")
        let localIsFinal = local.map { (try? set.updateTimestamp($0)) != nil } ?? false
        // Revalidated by its ETag while the trusted one is unexpired: a 304 stands for
        // exactly the bytes kept, which then go through every check a 200 with them
        // would (so a wrong or stale 304 is no more than a replay of the trusted
        // timestamp, which its version and expiry bound). Expired, it is fetched whole.
        let etag = localIsFinal ? local.flatMap(store.timestampETag(for:)) : nil
        let reply = try await download("metadata/timestamp.json", cap: Self.timestampCap, missingIsNil: false, ifNoneMatch: etag)
        let timestamp = reply.body ?? local ?? []
        if try set.updateTimestamp(timestamp) {
            try store.write("timestamp", timestamp)
            CrashPoint.afterTUFTimestamp.hit()
        }
        if reply.body != nil, timestamp == store.read("timestamp") {
            try store.keepTimestampETag(reply.etag, for: timestamp)
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

    /// 5.6.7: how the trusted metadata lists the target `path`, searched as python-tuf's
    /// `_preorder_depth_first_walk` searches it: preorder depth-first from the top-level
    /// targets; a role's own targets first, then the roles it delegates `path` to, in
    /// their order, where a matching terminating role drops every role not yet visited
    /// beside it; each role visited once, at most 1 + `maxDelegations` roles. A delegated
    /// role's metadata is loaded when the search reaches it: the persisted copy if it is
    /// still the version snapshot names, else downloaded and persisted.
    ///
    /// - Returns: nil when no role visited lists `path`.
    func find(_ path: String, in set: inout TUFTrustedSet) async throws -> TUFTargetFile? {
        try await findListing(path, in: &set)?.target
    }

    /// `find`, with the role whose metadata lists the target.
    func findListing(_ path: String, in set: inout TUFTrustedSet) async throws -> (target: TUFTargetFile, role: String)? {
        var toVisit: [(role: String, delegator: String)] = [("targets", "root")]
        var visited: Set<String> = []
        while visited.count <= Self.maxDelegations, let (role, delegator) = toVisit.popLast() {
            guard !visited.contains(role) else { continue }
            let targets = try await load(role, delegator: delegator, in: &set)
            if let target = targets.targets[path] { return (target, role) }
            visited.insert(role)
            let children = targets.delegations?.roles(for: path) ?? []
            if children.last?.terminating == true { toVisit.removeAll() }
            toVisit += children.reversed().map { ($0.name, role) }
        }
        return nil
    }

    /// The targets metadata of `role`, which `delegator` delegates to (5.6.7 steps 1-3).
    private func load(_ role: String, delegator: String, in set: inout TUFTrustedSet) async throws -> TUFTargets {
        if let loaded = set.targets(of: role) { return loaded }
        let stored = TUFMetadataStore.delegatedName(role)
        if let local = store.read(stored), (try? set.updateDelegatedTargets(local, role: role, delegator: delegator)) != nil,
           let loaded = set.targets(of: role) {
            return loaded
        }
        let meta = try set.meta(of: role)
        let file = Self.quoted(role)
        let name = set.root.consistentSnapshot ? "\(meta.version).\(file).json" : "\(file).json"
        let bytes = try await download("metadata/\(name)", cap: meta.length ?? Self.targetsCap)
        try set.updateDelegatedTargets(bytes, role: role, delegator: delegator)
        try store.write(stored, bytes)
        CrashPoint.afterTUFDelegated.hit()
        guard let loaded = set.targets(of: role) else { throw TUFKey.invalid("\(file) did not load") }
        return loaded
    }

    /// A role name as a URL path segment, as python-tuf's `parse.quote(name, "")` writes it.
    static func quoted(_ name: String) -> String {
        var out = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 15, radix: 16, uppercase: true)
            }
        }
        return out
    }

    /// 5.7: the target at `path`, found through the delegations, fetched by its
    /// hash-prefixed name when the repository is consistent, checked against its length
    /// and hashes.
    ///
    /// - Throws: `target-unlisted` when no trusted role lists it, `length-exceeded`
    ///   or `hash-mismatch` when the bytes are not the ones listed.
    func target(_ path: String, in set: inout TUFTrustedSet) async throws -> [UInt8] {
        guard let info = try await find(path, in: &set) else {
            throw OfflineAgentError(
                .manifest, "\(path) is not a target of targets v\(set.targets?.metadata.version ?? 0) nor of a role it delegates it to",
                cause: .targetUnlisted)
        }
        var name = path
        if set.root.consistentSnapshot, let hash = info.sha256 {
            let slash = path.lastIndex(of: "/")
            name = slash.map { "\(path[...$0])\(hash).\(path[path.index(after: $0)...])" } ?? "\(hash).\(path)"
        }
        // The bytes verified last time, while targets lists them still (python-tuf's
        // `find_cached_target`): a check that finds nothing new downloads no manifest.
        let kept = TUFMetadataStore.targetName(path)
        if info.sha256 != nil, let local = store.read(kept),
           (try? TUFTargetFile.check(local, length: info.length, hashes: info.hashes, name: path)) != nil {
            return local
        }
        let bytes: [UInt8] = try await download(name, cap: info.length)
        try TUFTargetFile.check(bytes, length: info.length, hashes: info.hashes, name: path)
        try store.write(kept, bytes)
        return bytes
    }

    private func download(_ name: String, cap: Int64) async throws -> [UInt8] {
        try await download(name, cap: cap, missingIsNil: false, ifNoneMatch: nil).body ?? []
    }

    private func download(_ name: String, cap: Int64, missingIsNil: Bool) async throws -> [UInt8]? {
        try await download(name, cap: cap, missingIsNil: missingIsNil, ifNoneMatch: nil).body
    }

    /// GETs `<repository>/name`, reading at most `cap` bytes. `missingIsNil`: a 404 or
    /// 403 is a nil body (the end of the root chain, as ngclient reads it). With
    /// `ifNoneMatch`, a 304 is a nil body (unchanged); a 304 to a request without it
    /// is refused, as the manifest check refuses it.
    private func download(
        _ name: String, cap: Int64, missingIsNil: Bool, ifNoneMatch: String?
    ) async throws -> (body: [UInt8]?, etag: String?) {
        guard let url = URL(string: repository.absoluteString + name) else {
            throw OfflineAgentError(.manifest, "invalid repository URL", cause: .usage, path: repository.absoluteString + name)
        }
        let headers = ifNoneMatch.map { [("If-None-Match", $0)] } ?? []
        let (response, _) = try await fetcher.get(url, headers: headers, phase: .manifest, timeout: fetcher.settings.manifestTimeout)
        if missingIsNil, response.status.code == 404 || response.status.code == 403 { return (nil, nil) }
        if response.status.code == 304 {
            guard ifNoneMatch != nil else {
                throw OfflineAgentError(.manifest, "server answered 304 to a request without If-None-Match", cause: .protocolViolation, path: url.absoluteString)
            }
            return (nil, nil)
        }
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
        let fields = response.headers
        return (data, Self.settledETag(fields.first(name: "ETag"), lastModified: fields.first(name: "Last-Modified"), date: fields.first(name: "Date")))
    }

    /// The answer's ETag, unless the file may have changed within the second it was
    /// served (`Last-Modified` less than 2 s before `Date`): nginx's ETag is the
    /// modification second and the size, so a timestamp re-signed within that second at
    /// the same size would carry the same ETag and be answered 304. Kept only once the
    /// file is older, any later change has a later modification time, hence a new ETag.
    static func settledETag(_ etag: String?, lastModified: String?, date: String?) -> String? {
        guard let etag else { return nil }
        guard let modified = lastModified.flatMap(HTTPDate.parse) else { return etag }
        guard let date = date.flatMap(HTTPDate.parse) else { return nil }
        return date - modified >= 2 ? etag : nil
    }
}
