import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct TimestampCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timestamp",
        abstract: "Re-sign the publish directory's TUF timestamp: freshness only, for every app.",
        discussion: """
            Writes metadata/timestamp.json anew (its version + 1, the same snapshot) valid for \
            --expires, signed with the timestamp key alone: a cron line on the host keeps devices \
            from calling the repository frozen, and the key there can ship no package \
            (docs/PUBLISHING.md, "TUF repository").
            """
    )

    @Option(help: "The publish directory.") var out: String
    @Option(help: "The Ed25519 private key file of the timestamp role.") var key: String
    @Option(help: "How long the new timestamp is valid: a duration like 1d or 12h (default 1d), or an RFC 3339 time.")
    var expires: String?

    func run() async throws {
        try await reportingFailures {
            let now = Date()
            let text = expires ?? "1d"
            let until: Date
            if let seconds = ManifestStageStep.parseDuration(text), seconds > 0 {
                until = now.addingTimeInterval(TimeInterval(seconds))
            } else if let date = RFC3339.date(from: text), date > now {
                until = date
            } else {
                throw PublishError(.usage, "--expires '\(text)' is not a future RFC 3339 time nor a duration like 1d")
            }
            let version = try TUFRepository.refreshTimestamp(
                publishDirectory: out, key: try SigningKey(contentsOfFile: key), expires: until)
            print("timestamp v\(version), expires \(RFC3339.string(from: until))")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
