import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish delegate`: an app's own TUF role.
struct DelegateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delegate",
        abstract: "Give an app its own TUF targets role and key: that key can then ship only that app.",
        discussion: """
            Writes new top-level targets metadata (signed with --key, the targets key) that \
            delegates the paths APP/* to the role APP, trusted for the key in --app-key \
            (threshold 1, terminating), and the app's first metadata/N.APP.json, signed with that \
            key, listing the app's files; then snapshot and timestamp (--snapshot-key, default \
            --key). From then on publish, stage, set, revert and promote on APP take \
            --key APP.key (with --snapshot-key), and any other key is refused for APP, naming both \
            fingerprints. Run it again with another --app-key to replace a lost or stolen app key \
            (docs/PUBLISHING.md, "Keys").

            With --halt-key instead of --app-key, the role is APP.halt, trusted for APP/rollout.json \
            alone: its key can halt or narrow APP's staged rollout (offline-publish halt, \
            offline-server --halt-key) and ship nothing (docs/PUBLISHING.md, "The halt key").
            """
    )

    @Option(help: "The publish directory.") var out: String
    @Option(help: "The app name: its role's name, trusted for the paths APP/*.") var app: String
    @Option(help: "The app's Ed25519 private key file (from keygen): it signs the app's first delegated metadata.") var appKey: String?
    @Option(help: "Instead of --app-key: the key of the app's halt role (it signs the role's first, empty metadata).") var haltKey: String?
    @Option(help: "The targets key (the key root names for targets).") var key: String
    @Option(help: "The snapshot and timestamp key (default: --key).") var snapshotKey: String?
    @OptionGroup var lock: LockOptions

    func run() async throws {
        try await reportingFailures {
            let targets = try SigningKey(contentsOfFile: key)
            let online = try snapshotKey.map(SigningKey.init(contentsOfFile:)) ?? targets
            guard (appKey == nil) != (haltKey == nil), let file = appKey ?? haltKey else {
                throw PublishError(.usage, "give exactly one of --app-key and --halt-key")
            }
            let roleKey = try SigningKey(contentsOfFile: file)
            let versions = try TUFRepository.delegate(
                app: app, publishDirectory: out, appKey: roleKey, halt: haltKey != nil,
                keys: TUFKeys(targets: [targets], snapshot: [online], timestamp: [online]), now: Date(), lockWait: try lock.wait())
            let paths = haltKey == nil ? "\(app)/*" : "\(app)/\(TUFRollout.fileName) (halt)"
            print("delegated \(paths) to key \(TUFSigner.key(roleKey).fingerprint): targets v\(versions.targets), snapshot v\(versions.snapshot), timestamp v\(versions.timestamp)")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
