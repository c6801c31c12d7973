import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish halt`: the halt key's one power.
struct HaltCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "halt",
        abstract: "Halt or narrow an app's staged rollout with its halt key alone (TUF).",
        discussion: """
            Writes APP/rollout.json, which narrows the stage of the app's current manifest to at \\
            most --percent (default 0: halted), and signs it with the key of the app's halt role \\
            (delegate --halt-key), with new snapshot and timestamp metadata (--snapshot-key, \\
            default --key). TUF devices apply it to that manifest only and never to widen a stage; \\
            the next release or an operator's stage is a new manifest, which it no longer narrows \\
            (docs/PUBLISHING.md, "The halt key"). Devices that trust a key, not a root, do not read it.
            """
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The publish directory.") var out: String
    @Option(help: "The share of devices (0-100) that may take the current version at most; 0 halts.") var percent = 0
    @Option(help: "The key of the app's halt role.") var key: String
    @Option(help: "The snapshot and timestamp key (default: --key).") var snapshotKey: String?
    @Option(help: "Why, kept in rollout.json.") var reason: String?
    @OptionGroup var lock: LockOptions

    func run() async throws {
        try await reportingFailures {
            let changed = try TUFRepository.halt(
                app: app, publishDirectory: out, key: try SigningKey(contentsOfFile: key),
                snapshotKey: try snapshotKey.map(SigningKey.init(contentsOfFile:)), stage: percent, reason: reason, now: Date(),
                lockWait: try lock.wait())
            print(changed ? "\(app): stage at most \(percent)%\(percent == 0 ? " (halted)" : "")" : "\(app): already at most \(percent)%: nothing written")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
