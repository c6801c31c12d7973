import ArgumentParser
import OfflinePublish

/// What every verb that changes a published release takes: the key that signs its new
/// manifest, and why, for the revision `history` lists.
struct RevisionOptions: ParsableArguments {
    @Option(help: "Ed25519 private key file to sign the new manifest.json with (needed when it was signed).") var key: String?
    @Option(help: "TUF: the snapshot and timestamp key, when --key is an app's delegated key (default: --key).") var snapshotKey: String?
    @Option(help: "Why, recorded in the revision (history).") var reason: String?
    @OptionGroup var lock: LockOptions

    /// The key read from `--key`, if given.
    func signingKey() throws -> SigningKey? { try key.map(SigningKey.init(contentsOfFile:)) }

    /// The key read from `--snapshot-key`, if given.
    func snapshotSigningKey() throws -> SigningKey? { try snapshotKey.map(SigningKey.init(contentsOfFile:)) }
}
