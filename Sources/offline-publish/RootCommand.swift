import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish root propose|sign|commit`: root rotation and m-of-n signing.
struct RootCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "root",
        abstract: "Rotate keys through a new TUF root, signed by m of n holders.",
        discussion: """
            propose writes the next root (new keys, thresholds, expiry) to a staging file; each key \
            holder signs that file with `sign`; `commit` checks it as a device does (version N+1, \
            signed by the root thresholds of the current root and of itself) and writes \
            metadata/N+1.root.json. Every N.root.json stays. Then publish (or set) with the new \
            keys: metadata the old keys signed is re-signed (docs/PUBLISHING.md, "Keys").
            """,
        subcommands: [RootProposeCommand.self, RootSignCommand.self, RootCommitCommand.self]
    )
}

extension RootCommand {
    /// A duration (`365d`) from now, or a future RFC 3339 time.
    static func until(_ text: String, now: Date = Date()) throws -> Date {
        if let seconds = ManifestStageStep.parseDuration(text), seconds > 0 { return now.addingTimeInterval(TimeInterval(seconds)) }
        if let date = RFC3339.date(from: text), date > now { return date }
        throw PublishError(.usage, "--expires '\(text)' is not a future RFC 3339 time nor a duration like 365d")
    }
}
