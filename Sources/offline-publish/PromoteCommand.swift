import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct PromoteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "promote",
        abstract: "Publish a version's exact package from one publish directory (beta) into another.",
        discussion: """
            The package of --version in --from (checked against its state.json) becomes the latest \
            version in --to, byte for byte, with patches from --to's last 3 versions. Devices of \
            each channel point at their own manifest URL. Changes nothing on failure.
            """
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The version to promote.") var version: String
    @Option(help: "The publish directory it was tested in.") var from: String
    @Option(help: "The publish directory to promote it to.") var to: String
    @OptionGroup var revision: RevisionOptions

    func run() async throws {
        try await reportingFailures {
            guard let parsed = Version(version) else { throw PublishError(.usage, "invalid version '\(version)'") }
            let result = try ReleaseEditor.promote(
                app: app, version: parsed, from: from, to: to, key: try revision.signingKey(), snapshotKey: try revision.snapshotSigningKey(), reason: revision.reason, lockWait: try revision.lock.wait())
            print("promoted \(app) \(parsed) to \(result.appDirectory)")
            print("  \(result.release.packageFile)  \(result.release.size) bytes  sha256 \(result.release.sha256)")
            MetadataExpiryWarning.check(publishDirectory: to)
        }
    }
}
