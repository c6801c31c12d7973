import ArgumentParser
import Foundation
import OfflineAgent

struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a sync --config file without touching the network.",
        discussion: """
            Prints, per app, the manifest URL, the fingerprints of its trusted keys (or "unsigned"), \
            its cookie profile and its network policy. Exit status 64 names the first problem: an \
            unknown key (with the nearest valid one), a wrong type, an app without a trusted key \
            that does not say "allowUnsigned": true.
            """
    )

    @Argument(help: "The config file.") var file: String
    @Option(help: "A key for apps that name none, as sync --public-key: base64, or the path of a file holding it.") var publicKey: String?

    func run() async throws {
        try await reportingFailures {
            let (config, entries) = try ConfigFile.load(file, fallbackKeys: try SyncCommand.keys(publicKey))
            print("root: \(config.root)")
            for entry in entries {
                let keys = try entry.publicKeys.map { try KeyFingerprint.of(base64: $0) }
                print("\(entry.app): manifest \(entry.manifest.absoluteString)")
                print("  keys: \(keys.isEmpty ? "unsigned" : keys.joined(separator: ", "))")
                print("  profile: \(entry.profile ?? CookieProfile.defaultName)")
                print("  network: \((entry.network ?? .unmetered).rawValue)")
            }
        }
    }
}
