import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct SetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Change the settings of the live release without a new version.",
        discussion: """
            Settings not given stay as they are. --expires takes an RFC 3339 time, a duration from \
            now (90m, 24h, 7d), or never: run `set --expires 7d` from cron to keep signatures fresh. \
            Refuses what devices would refuse (a mini version above the latest version, an expiry \
            in the past, a fallback that is not a file of the package), naming the value. Re-signs \
            manifest.json (with --key when it was signed), records a revision in state.json, and \
            changes nothing on failure.
            """
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The publish directory.") var out: String
    @Option(help: "Share of devices (0-100) allowed to use the package offline.") var rollout: Int?
    @Option(help: "The lowest version still allowed to be used offline.") var miniVersion: String?
    @Option(help: "RFC 3339 time, a duration from now (7d, 24h, 90m), or 'never'.") var expires: String?
    @Option(help: "any, or wifi to download only on unmetered networks.") var networkType: String?
    @Option(help: "A URL prefix the package serves (repeat for several); replaces the list.") var whitelist: [String] = []
    @Option(help: "The entry page (a file of the package) for single-page routes.") var fallback: String?
    @OptionGroup var revision: RevisionOptions

    func run() async throws {
        try await reportingFailures {
            let state = try ReleaseEditor.set(
                app: app, publishDirectory: out, settings: try settings(now: Date()),
                key: try revision.signingKey(), snapshotKey: try revision.snapshotSigningKey(), reason: revision.reason, lockWait: try revision.lock.wait())
            print("\(app) \(state.latest): \(state.revisions?.last?.reason ?? "set")")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }

    private func settings(now: Date) throws -> ReleaseSettings {
        func usage(_ reason: String) -> PublishError { PublishError(.usage, reason) }
        var settings = ReleaseSettings(rollout: rollout, whitelist: whitelist.isEmpty ? nil : whitelist, fallback: fallback)
        if let miniVersion {
            guard let parsed = Version(miniVersion) else { throw usage("invalid mini version '\(miniVersion)'") }
            settings.miniVersion = parsed
        }
        if let networkType {
            guard let parsed = Manifest.NetworkType(rawValue: networkType) else {
                throw usage("network type must be 'any' or 'wifi', not '\(networkType)'")
            }
            settings.networkType = parsed
        }
        if let expires {
            if expires == "never" {
                settings.expires = .never
            } else if let seconds = ManifestStageStep.parseDuration(expires) {
                guard seconds > 0 else { throw usage("--expires \(expires) is now: no device would accept the manifest") }
                settings.expires = .at(now.addingTimeInterval(TimeInterval(seconds)))
            } else if let date = RFC3339.date(from: expires) {
                settings.expires = .at(date)
            } else {
                throw usage("--expires '\(expires)' is not an RFC 3339 time, a duration like 7d, or never")
            }
        }
        return settings
    }
}
