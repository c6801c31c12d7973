import FoundationEssentials

/// The metadata a client trusts, loaded in the specification's order (5.3 to 5.6):
/// root, then timestamp, snapshot, targets, each checked against what came before
/// it. Pure: it reads no network and no disk, so every rule is tested on bytes.
///
/// Like python-tuf's `TrustedMetadataSet`, metadata may be loaded expired when more
/// of its kind may follow (a root in the middle of a chain); the final root,
/// timestamp, snapshot and targets must be unexpired at `now`.
package struct TUFTrustedSet: Sendable {
    package private(set) var root: TUFRoot
    package private(set) var timestamp: TUFTimestamp?
    package private(set) var snapshot: TUFSnapshot?
    package private(set) var targets: TUFTargets?
    /// Delegated targets metadata loaded so far, by role name (step 5.6.7).
    package private(set) var delegated: [String: TUFTargets] = [:]
    package let now: Date

    /// Starts from a trusted root (the configured bootstrap or the persisted one):
    /// it must be signed by its own root role's threshold.
    package init(root bytes: some Collection<UInt8>, now: Date) throws {
        let root = try TUFRoot(bytes)
        try root.verify(root.metadata, as: "root")
        self.root = root
        self.now = now
    }

    /// Step 5.3: a root offered as the next one. It must be version N+1 and signed by
    /// the thresholds of both the trusted root and itself.
    ///
    /// - Returns: whether the keys of timestamp or snapshot changed (the caller then
    ///   discards the trusted timestamp and snapshot, 5.3.11).
    @discardableResult
    package mutating func updateRoot(_ bytes: some Collection<UInt8>) throws -> Bool {
        precondition(timestamp == nil, "roots are loaded before timestamp")
        let new: TUFRoot
        do {
            new = try TUFRoot(bytes)
        } catch let error as OfflineAgentError {
            throw OfflineAgentError(.manifest, "root v\(root.metadata.version + 1): \(error.reason)", cause: .rootChainBroken)
        }
        do {
            try root.verify(new.metadata, as: "root")
            try new.verify(new.metadata, as: "root")
        } catch let error as OfflineAgentError {
            throw OfflineAgentError(
                .manifest, "root v\(new.metadata.version) is not signed by the thresholds of trusted root v\(root.metadata.version) and of itself: \(error.reason)",
                cause: .rootChainBroken)
        }
        guard new.metadata.version == root.metadata.version + 1 else {
            throw OfflineAgentError(
                .manifest, "root v\(new.metadata.version) offered as the successor of v\(root.metadata.version)", cause: .rootChainBroken)
        }
        let rotated = ["timestamp", "snapshot"].contains { root.signers(of: $0) != new.signers(of: $0) }
        root = new
        return rotated
    }

    /// Step 5.4: timestamp. Its version never goes down, nor the snapshot version it names.
    ///
    /// - Returns: false when it is the trusted timestamp's version (nothing new; the
    ///   trusted one stays), true when it was accepted.
    @discardableResult
    package mutating func updateTimestamp(_ bytes: some Collection<UInt8>) throws -> Bool {
        precondition(snapshot == nil, "timestamp is loaded before snapshot")
        guard !root.metadata.isExpired(at: now) else {
            throw OfflineAgentError(.manifest, "root v\(root.metadata.version) expired at \(TUFMetadata.string(root.metadata.expires))", cause: .metadataExpired)
        }
        let new = try TUFTimestamp(bytes)
        try root.verify(new.metadata, as: "timestamp")
        if let trusted = timestamp {
            guard new.metadata.version >= trusted.metadata.version else {
                throw OfflineAgentError(
                    .manifest, "timestamp v\(new.metadata.version) is older than trusted v\(trusted.metadata.version)", cause: .metadataReplay)
            }
            guard new.snapshot.version >= trusted.snapshot.version else {
                throw OfflineAgentError(
                    .manifest, "timestamp names snapshot v\(new.snapshot.version), older than trusted v\(trusted.snapshot.version)",
                    cause: .metadataReplay)
            }
            if new.metadata.version == trusted.metadata.version {
                try checkFinalTimestamp()
                return false
            }
        }
        timestamp = new
        try checkFinalTimestamp()
        return true
    }

    /// Forgets an accepted timestamp that fails as final (expired), so the persisted one
    /// stays the old one; the caller throws the error.
    private func checkFinalTimestamp() throws {
        guard let timestamp, !timestamp.metadata.isExpired(at: now) else {
            throw OfflineAgentError(
                .manifest, "timestamp v\(timestamp?.metadata.version ?? 0) expired at \(timestamp.map { TUFMetadata.string($0.metadata.expires) } ?? "?")",
                cause: .metadataExpired)
        }
    }

    /// Step 5.5: snapshot, matching the length and hashes timestamp gives (unless
    /// `trusted`: a persisted copy verified once already), signed by the snapshot role;
    /// no targets role it lists goes down from the trusted snapshot, and none vanishes.
    package mutating func updateSnapshot(_ bytes: some Collection<UInt8>, trusted: Bool = false) throws {
        guard let timestamp else { preconditionFailure("snapshot is loaded after timestamp") }
        precondition(targets == nil, "snapshot is loaded before targets")
        let data = Array(bytes)
        if !trusted {
            try TUFTargetFile.check(data, length: timestamp.snapshot.length, hashes: timestamp.snapshot.hashes, name: "snapshot")
        }
        let new = try TUFSnapshot(data)
        try root.verify(new.metadata, as: "snapshot")
        if let old = snapshot {
            for (name, meta) in old.meta {
                guard let now = new.meta[name] else {
                    throw OfflineAgentError(.manifest, "snapshot v\(new.metadata.version) drops \(name)", cause: .metadataReplay)
                }
                guard now.version >= meta.version else {
                    throw OfflineAgentError(
                        .manifest, "snapshot names \(name) v\(now.version), older than trusted v\(meta.version)", cause: .metadataReplay)
                }
            }
        }
        snapshot = new
        try checkFinalSnapshot()
    }

    private func checkFinalSnapshot() throws {
        guard let snapshot, let timestamp else { return }
        guard !snapshot.metadata.isExpired(at: now) else {
            throw OfflineAgentError(
                .manifest, "snapshot v\(snapshot.metadata.version) expired at \(TUFMetadata.string(snapshot.metadata.expires))", cause: .metadataExpired)
        }
        guard snapshot.metadata.version == timestamp.snapshot.version else {
            throw OfflineAgentError(
                .manifest, "snapshot v\(snapshot.metadata.version) is not v\(timestamp.snapshot.version), the one timestamp names",
                cause: .metadataMismatch)
        }
    }

    /// Whether the snapshot in hand is the one timestamp names and unexpired (a
    /// persisted snapshot that is not must be downloaded again).
    package var snapshotIsFinal: Bool { (try? checkFinalSnapshot()) != nil && snapshot != nil }

    /// Forgets the snapshot in hand (a persisted one that is not final) before the download.
    package mutating func dropSnapshot() { snapshot = nil }

    /// Step 5.6: targets, matching what snapshot gives (version always, length and
    /// hashes when listed), signed by the targets role, unexpired.
    package mutating func updateTargets(_ bytes: some Collection<UInt8>) throws {
        precondition(snapshot != nil, "targets are loaded after snapshot")
        let meta = try meta(of: "targets")
        targets = try checkTargets(bytes, name: "targets", meta: meta) { try root.verify($0, as: "targets") }
    }

    /// The targets metadata of role `name`: the top-level targets, or a delegated role loaded.
    package func targets(of name: String) -> TUFTargets? { name == "targets" ? targets : delegated[name] }

    /// What snapshot says of role `name`'s metadata (`NAME.json`).
    ///
    /// - Throws: `metadata-mismatch` when snapshot does not name it.
    package func meta(of name: String) throws -> TUFMetaFile {
        guard let snapshot else { preconditionFailure("targets are loaded after snapshot") }
        guard let meta = snapshot.meta["\(name).json"] else {
            throw OfflineAgentError(
                .manifest, "snapshot v\(snapshot.metadata.version) does not name \(StrictJSON.printable(name)).json", cause: .metadataMismatch)
        }
        return meta
    }

    /// Step 5.6.7, one delegated role: the metadata of `name`, which the loaded role
    /// `delegator` delegates to, matching what snapshot gives for `NAME.json`, signed by
    /// the keys and threshold `delegator` names for it (not root's), unexpired.
    package mutating func updateDelegatedTargets(_ bytes: some Collection<UInt8>, role name: String, delegator: String) throws {
        guard let parent = targets(of: delegator) else { preconditionFailure("a delegated role is loaded after its delegator") }
        guard let delegations = parent.delegations else {
            throw OfflineAgentError(.manifest, "\(StrictJSON.printable(delegator)) delegates to no role", cause: .targetUnlisted)
        }
        let meta = try meta(of: name)
        delegated[name] = try checkTargets(bytes, name: name, meta: meta) { try delegations.verify($0, as: name) }
    }

    /// The checks of 5.6 and 5.6.7: snapshot final, length and hashes, signature, the
    /// version snapshot names, unexpired.
    private func checkTargets(
        _ bytes: some Collection<UInt8>, name: String, meta: TUFMetaFile, verify: (TUFMetadata) throws -> Void
    ) throws -> TUFTargets {
        try checkFinalSnapshot()
        let data = Array(bytes)
        try TUFTargetFile.check(data, length: meta.length, hashes: meta.hashes, name: name)
        let new = try TUFTargets(data)
        try verify(new.metadata)
        let printable = StrictJSON.printable(name)
        guard new.metadata.version == meta.version else {
            throw OfflineAgentError(
                .manifest, "\(printable) v\(new.metadata.version) is not v\(meta.version), the one snapshot names", cause: .metadataMismatch)
        }
        guard !new.metadata.isExpired(at: now) else {
            throw OfflineAgentError(
                .manifest, "\(printable) v\(new.metadata.version) expired at \(TUFMetadata.string(new.metadata.expires))", cause: .metadataExpired)
        }
        return new
    }
}
