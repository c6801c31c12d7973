import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a sync --config file without touching the network.",
        discussion: """
            Prints, per app, the manifest URL, the fingerprints of its trusted keys (or "unsigned"), \
            its cookie profile, its network policy, its fleet-report collector (and whether a report token is set, never the token) and whether it is held (`offline-agent hold`). Exit status 64 names the first problem: an \
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
            // Holds live in the root; a root not made yet holds nothing (and is not created here).
            let agent = FileManager.default.fileExists(atPath: config.root) ? Agent(root: URL(fileURLWithPath: config.root)) : nil
            for entry in entries {
                let keys = try entry.publicKeys.map { try KeyFingerprint.of(base64: $0) }
                print("\(entry.app): manifest \(entry.manifest.absoluteString)")
                print("  keys: \(keys.isEmpty ? "unsigned" : keys.joined(separator: ", "))")
                print("  profile: \(entry.profile ?? CookieProfile.defaultName)")
                print("  network: \((entry.network ?? .auto).rawValue)")
                let held = await agent?.lifecycle(app: entry.app).held ?? false
                print("  held: \(held ? "yes (offline-agent unhold to release)" : "no")")
                print("  report: \(entry.report?.absoluteString ?? "none")")
                // Whether a token is set, never the token.
                if entry.reportToken != nil { print("  report token: set") }
            }
        }
    }
}
