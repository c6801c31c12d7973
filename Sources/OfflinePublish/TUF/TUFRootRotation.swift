import Crypto
import Foundation
import OfflineAgent

/// Root rotation with m-of-n signing (`offline-publish root propose|sign|commit`,
/// docs/PUBLISHING.md "Keys"): the next root is proposed to a staging file, each key
/// holder signs that file where their key lives, and `commit` writes it as
/// `metadata/N+1.root.json` only when it passes exactly the checks a device makes
/// (`TUFTrustedSet.updateRoot`: version N+1, the root thresholds of the trusted root
/// and of itself). Every `N.root.json` stays: a device on root 1 walks the chain.
public enum TUFRootRotation {
    /// A role's new keys and threshold; nil fields keep the current root's.
    public struct RoleChange: Sendable {
        public var keys: [Curve25519.Signing.PublicKey]?
        public var threshold: Int?

        public init(keys: [Curve25519.Signing.PublicKey]? = nil, threshold: Int? = nil) {
            self.keys = keys
            self.threshold = threshold
        }
    }

    /// Writes to `file` the proposal for the next root of `publishDirectory`: the latest
    /// root's fields with `changes` applied, version N+1, expiring at `expires`, and no
    /// signature yet.
    ///
    /// - Returns: the proposed version.
    @discardableResult
    public static func propose(publishDirectory: String, file: String, changes: [String: RoleChange], expires: Date) throws -> Int64 {
        let directory = TUFRepository.metadataDirectory(FileSystem.absolute(publishDirectory))
        guard let (version, root) = try TUFRepository.latestRoot(in: directory) else {
            throw PublishError(.usage, "\(directory) has no N.root.json: publish with --key first", path: directory)
        }
        for name in changes.keys where !TUFMetadata.topLevelRoles.contains(name) {
            throw PublishError(.usage, "unknown role '\(name)' (root, targets, snapshot, timestamp)")
        }
        var signed = TUFRepository.renewed(root, expires: expires, version: version + 1)
        var keys = root.keys.mapValues(\.json)
        var roles = root.roles
        for (name, change) in changes {
            let current = root.role(name)
            var keyIDs = current.keyIDs
            if let given = change.keys {
                let listed = given.map(TUFKey.init(publicKey:))
                for key in listed { keys[key.keyID] = key.json }
                keyIDs = Array(Set(listed.map(\.keyID))).sorted()
            }
            let threshold = change.threshold ?? min(current.threshold, max(1, keyIDs.count))
            guard threshold >= 1, threshold <= keyIDs.count else {
                throw PublishError(.usage, "\(name): threshold \(threshold) needs at least that many keys (\(keyIDs.count) given)")
            }
            roles[name] = TUFRole(keyIDs: keyIDs, threshold: threshold)
        }
        // Keys no role names any more leave the root (a removed key is no key at all).
        let named = Set(roles.values.flatMap(\.keyIDs))
        signed["keys"] = .object(keys.filter { named.contains($0.key) })
        signed["roles"] = .object(roles.mapValues(\.json))
        try write(TUFSigner.file(signed, keys: []), to: file)
        return version + 1
    }

    /// Adds `key`'s signature to the proposal in `file` (replacing an earlier one by the
    /// same key): a holder of a current or a proposed root key signs where the key lives.
    /// Which signatures count is `commit`'s check, the device's.
    ///
    /// - Returns: the key's fingerprint.
    @discardableResult
    public static func sign(file: String, key: SigningKey) throws -> String {
        let (signed, signatures) = try read(file)
        // A proposal that is no root is refused here, before a holder signs it.
        _ = try TUFRoot(StrictJSON.object(["signed": .object(signed), "signatures": .array([])]).written())
        let tufKey = TUFSigner.key(key)
        var all = signatures.filter {
            guard case .object(let fields) = $0, case .string(let id)? = fields["keyid"] else { return false }
            return id != tufKey.keyID
        }
        let signature = try TUFSigner.file(signed, keys: [key])
        guard case .object(let fields) = try StrictJSON.parse(signature), case .array(let own)? = fields["signatures"] else {
            throw PublishError(.publish, "cannot sign the proposal", path: file)
        }
        all += own
        try write(StrictJSON.object(["signed": .object(signed), "signatures": .array(all)]).written(), to: file)
        return tufKey.fingerprint
    }

    /// Verifies the proposal in `file` as a device would (next version, thresholds of the
    /// latest root and of itself) and writes it as `metadata/N+1.root.json`.
    ///
    /// Holds every app's lock, in name order, then the repository's, waiting at most
    /// `lockWait` for each.
    ///
    /// - Throws: `root-chain-broken` naming the threshold not met; nothing is written.
    /// - Returns: the committed version.
    @discardableResult
    public static func commit(publishDirectory: String, file: String, now: Date = Date(), lockWait: Duration = PublishLock.defaultWait) throws -> Int64 {
        let out = FileSystem.absolute(publishDirectory)
        // The apps' locks first, as a release verb holds its app's from its key check to its
        // metadata refresh (the order `delegate` takes): a root committed in between, with
        // new keys, made the verb commit, then fail to sign, leaving metadata that lists a
        // manifest no longer on disk.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []
        let apps = names.filter { AppName.isValid($0) && $0 != TUFRepository.directoryName && FileSystem.isDirectory("\(out)/\($0)") }
        let appLocks = try apps.sorted().map { try PublishLock(app: $0, publishDirectory: out, wait: lockWait) }
        let lock = try PublishLock(app: TUFRepository.directoryName, publishDirectory: out, wait: lockWait)
        return try withExtendedLifetime((appLocks, lock)) {
            let directory = TUFRepository.metadataDirectory(out)
            guard let (version, _) = try TUFRepository.latestRoot(in: directory) else {
                throw PublishError(.usage, "\(directory) has no N.root.json: publish with --key first", path: directory)
            }
            let current = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(version).root.json"))
            let bytes: Data
            do {
                bytes = try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                throw PublishError(.usage, "cannot read the proposal", path: file)
            }
            // Expiry is no part of the chain check: a device may walk through expired roots.
            var set = try TUFTrustedSet(root: current, now: now)
            try set.updateRoot(bytes)
            guard !set.root.metadata.isExpired(at: now) else {
                throw PublishError(.usage, "the proposed root expired at \(TUFMetadata.string(set.root.metadata.expires))")
            }
            do {
                try FileSystem.writeAtomically(bytes, to: "\(directory)/\(version + 1).root.json")
            } catch {
                throw PublishError(.publish, "cannot write TUF metadata", path: "\(directory)/\(version + 1).root.json", underlying: error)
            }
            return version + 1
        }
    }

    /// Reads a public key file as `keygen` writes it (`FILE.pub`, base64 of 32 bytes).
    /// A private key file has the same shape, so only a `.pub` name is taken: a private
    /// key listed as a public one would name a key nobody holds.
    public static func publicKey(file: String) throws -> Curve25519.Signing.PublicKey {
        guard file.hasSuffix(".pub") else {
            throw PublishError(.usage, "\(file): give the public key file keygen wrote (FILE.pub), never the private key")
        }
        guard let text = try? String(contentsOfFile: file, encoding: .utf8),
              let raw = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 32,
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
        else {
            throw PublishError(.usage, "\(file) is not an Ed25519 public key file (base64 of 32 bytes)", path: file)
        }
        return key
    }

    private static func read(_ file: String) throws -> ([String: StrictJSON], [StrictJSON]) {
        guard let bytes = FileManager.default.contents(atPath: file) else {
            throw PublishError(.usage, "cannot read the proposal", path: file)
        }
        guard case .object(let fields)? = try? StrictJSON.parse(bytes), case .object(let signed)? = fields["signed"],
              case .array(let signatures)? = fields["signatures"]
        else {
            throw PublishError(.usage, "\(file) is not a root proposal ({signed, signatures})", path: file)
        }
        return (signed, signatures)
    }

    private static func write(_ data: Data, to file: String) throws {
        do {
            try FileSystem.writeAtomically(data, to: file)
        } catch {
            throw PublishError(.publish, "cannot write the proposal", path: file, underlying: error)
        }
    }
}
