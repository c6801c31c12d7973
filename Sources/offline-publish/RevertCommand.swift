import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct RevertCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revert",
        abstract: "Publish an earlier version's exact package as a new version.",
        discussion: """
            Devices never install a lower version, so going back means going forward: the package \
            of --to is published byte for byte as --version (default: the next patch number after \
            the latest), with patches from the last 3 versions, so devices on the bad version move \
            back with a small patch. Settings are kept; the stage is 100. Changes nothing on failure.

            --new-epoch is the recovery from a version published too high (a typo such as \
            999999999.0.0, or a stolen key): the release goes to the next epoch, and the package of \
            --to is published as a version that may be below the latest (default: the next patch \
            number after --to not published yet). Devices take it although it is lower than theirs, \
            and refuse any manifest of an older epoch from then on (docs/PUBLISHING.md, "Recovering \
            from a version published too high").
            """
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The publish directory.") var out: String
    @Option(help: "The earlier version whose package to publish again.") var to: String
    @Option(help: "The new version (default: the next patch number).") var version: String?
    @Flag(help: "Go to the next epoch: the new version may be below the latest (recovery from a version published too high).")
    var newEpoch = false
    @OptionGroup var revision: RevisionOptions

    func run() async throws {
        try await reportingFailures {
            guard let target = Version(to) else { throw PublishError(.usage, "invalid version '\(to)'") }
            var newVersion: Version?
            if let version {
                guard let parsed = Version(version) else { throw PublishError(.usage, "invalid version '\(version)'") }
                newVersion = parsed
            }
            let result = try ReleaseEditor.revert(
                app: app, publishDirectory: out, to: target, newVersion: newVersion, newEpoch: newEpoch,
                key: try revision.signingKey(), snapshotKey: try revision.snapshotSigningKey(), reason: revision.reason, lockWait: try revision.lock.wait())
            let epoch = result.release.epoch.map { " (epoch \($0))" } ?? ""
            print("reverted \(app) to the package of \(target) as \(result.release.version)\(epoch)")
            for patch in result.patches { print("  \(patch.file)  \(patch.size) bytes") }
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
