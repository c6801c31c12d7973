import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct StageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stage",
        abstract: "Set the staged rollout of the latest version: the share of devices that may take it.",
        discussion: """
            Devices whose bucket (1-100, docs/PROTOCOL.md) is above PERCENT neither download nor \
            install the latest version: they keep theirs, used offline as before, and their sync \
            reports not-in-stage. 0 halts the rollout: no new device takes the version, devices \
            already on it keep it. Replaces a --stage-schedule. Re-signs manifest.json (with --key \
            when it was signed), records a revision in state.json, and changes nothing on failure.
            """
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The publish directory.") var out: String
    @Option(help: "Share of devices (0-100) that may take the latest version; 0 halts.") var percent: Int
    @OptionGroup var revision: RevisionOptions

    func run() async throws {
        try await reportingFailures {
            let state = try ReleaseEditor.stage(
                app: app, publishDirectory: out, percent: percent, key: try revision.signingKey(), snapshotKey: try revision.snapshotSigningKey(), reason: revision.reason, lockWait: try revision.lock.wait())
            print("\(app) \(state.latest): stage \(percent)%\(percent == 0 ? " (halted)" : "")")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
