import ArgumentParser
import Foundation
import Logging
import OfflineAgent

struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Check for a newer package and install it, crash-safely.",
        discussion: """
            Exit status: 0 updated, up-to-date, throttled, deferred, held or known-bad; 1 failed (nothing installed changed); \
            64 usage; 75 another sync holds the lock.
            With --config FILE, every app listed in the JSON file is synced:
              {"root": "/var/lib/offline-agent", "publicKey": "BASE64", "network": "unmetered",
               "profile": "default", "maxTrialLaunches": 3,
               "apps": [{"app": "mall", "manifest": "https://h5.example.com/manifest", "publicKey": "BASE64", "profile": "alice"}]}
            "publicKey", "network", "profile" and "maxTrialLaunches" are optional; an app's own publicKey and profile win over the top-level ones.
            Requests carry and store cookies in the profile's jar (<root>/profiles/<name>/cookies.json); \
            profiles never see each other's cookies. See `offline-agent cookies`.
            """
    )

    @Option(help: "The agent's root directory.") var root: String?
    @Option(help: "The app to sync.") var app: String?
    @Option(help: "The manifest URL.") var manifest: String?
    @Option(help: "A JSON file listing apps to sync (see above).") var config: String?
    @Flag(help: "Skip the 5-minute throttle.") var force = false
    @Flag(help: "Print one JSON object per app on stdout.") var json = false
    @Option(help: "Require manifests signed by this base64 Ed25519 public key.") var publicKey: String?
    @Option(help: "The network the device is on: metered or unmetered.") var network: NetworkKind = .unmetered
    @Option(help: "The device id for rollout (the root's stable id when absent).") var deviceId: String?
    @Option(help: "The cookie profile whose jar the requests use.") var profile: String = CookieProfile.defaultName
    @Option(help: "Launches a new version may have unconfirmed before it is rolled back (default 3; 0: never).")
    var maxTrialLaunches: Int?

    func validate() throws {
        if config == nil {
            guard root != nil, app != nil, manifest != nil else {
                throw ValidationError("give --root, --app and --manifest, or --config FILE")
            }
        } else if app != nil || manifest != nil {
            throw ValidationError("--config cannot be combined with --app or --manifest")
        }
        if let maxTrialLaunches, maxTrialLaunches < 0 { throw ValidationError("--max-trial-launches must be 0 or more") }
    }

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let jobs = try await reportingFailures { try loadJobs() }
        var worst: Int32 = 0
        for job in jobs {
            var configuration = AgentConfiguration()
            configuration.maxTrialLaunches = job.maxTrialLaunches
            let agent = Agent(root: URL(fileURLWithPath: job.root), configuration: configuration)
            let display = ProgressDisplay(events: agent.events)
            let options = SyncOptions(force: force, publicKey: job.publicKey, network: job.network, profile: job.profile)
            let report = await agent.sync(app: job.app, manifest: job.manifest, options: options)
            await display.finish()
            if json {
                print(SyncJSON(report).encoded())
            } else {
                printError(SyncJSON.line(report))
            }
            if let error = report.error { worst = max(worst, error.exitStatus == 75 ? 75 : error.exitStatus == 64 ? 64 : 1) }
        }
        if worst != 0 { throw ExitCode(worst) }
    }

    struct Job {
        var root: String
        var app: String
        var manifest: URL
        var publicKey: String?
        var network: NetworkKind
        var profile: String
        var maxTrialLaunches = VersionLifecycle.defaultMaxTrialLaunches
    }

    private struct ConfigFile: Decodable {
        struct App: Decodable {
            var app: String
            var manifest: String
            var publicKey: String?
            var profile: String?
        }
        var root: String
        var publicKey: String?
        var network: NetworkKind?
        var profile: String?
        var maxTrialLaunches: Int?
        var apps: [App]
    }

    private func loadJobs() throws -> [Job] {
        guard let config else {
            guard let url = URL(string: manifest!), url.scheme != nil else {
                throw OfflineAgentError(.usage, "invalid manifest URL '\(manifest!)'")
            }
            return [Job(root: root!, app: app!, manifest: url, publicKey: publicKey, network: network, profile: profile,
                        maxTrialLaunches: maxTrialLaunches ?? VersionLifecycle.defaultMaxTrialLaunches)]
        }
        guard let data = FileManager.default.contents(atPath: config) else {
            throw OfflineAgentError(.usage, "cannot read config file", path: config)
        }
        let file: ConfigFile
        do { file = try JSONDecoder().decode(ConfigFile.self, from: data) } catch {
            throw OfflineAgentError(.usage, "invalid config file: \(error)", path: config)
        }
        if let limit = file.maxTrialLaunches, limit < 0 {
            throw OfflineAgentError(.usage, "invalid config file: maxTrialLaunches must be 0 or more", path: config)
        }
        return try file.apps.map { entry in
            guard let url = URL(string: entry.manifest), url.scheme != nil else {
                throw OfflineAgentError(.usage, "invalid manifest URL '\(entry.manifest)'", path: config)
            }
            return Job(root: root ?? file.root, app: entry.app, manifest: url,
                       publicKey: entry.publicKey ?? file.publicKey ?? publicKey, network: file.network ?? network,
                       profile: entry.profile ?? file.profile ?? profile,
                       maxTrialLaunches: file.maxTrialLaunches ?? maxTrialLaunches ?? VersionLifecycle.defaultMaxTrialLaunches)
        }
    }
}

extension NetworkKind: ExpressibleByArgument {}

/// The `sync --json` object: app, result, version, previousVersion, via, bytesDownloaded, error.
struct SyncJSON: Encodable {
    var app: String
    var result: String
    var version: String?
    var previousVersion: String?
    var via: String?
    var bytesDownloaded: Int64
    var error: String?
    /// The stable cause code (`OfflineAgentError.Cause`).
    var errorCode: String?
    /// The phase that failed (`OfflineAgentError.Code`).
    var phase: String?

    init(_ report: SyncReport) {
        app = report.app
        result = report.result.rawValue
        version = report.version?.description
        previousVersion = report.previousVersion?.description
        via = report.via?.rawValue
        bytesDownloaded = report.bytesDownloaded
        error = report.error?.description
        errorCode = report.error?.cause.rawValue
        phase = report.error?.code.rawValue
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(app, forKey: .app)
        try c.encode(result, forKey: .result)
        // null rather than absent, so consumers can rely on the keys.
        try c.encode(version, forKey: .version)
        try c.encode(previousVersion, forKey: .previousVersion)
        try c.encode(via, forKey: .via)
        try c.encode(bytesDownloaded, forKey: .bytesDownloaded)
        try c.encodeIfPresent(error, forKey: .error)
        try c.encodeIfPresent(errorCode, forKey: .errorCode)
        try c.encodeIfPresent(phase, forKey: .phase)
    }

    private enum CodingKeys: String, CodingKey {
        case app, result, version, previousVersion, via, bytesDownloaded, error, errorCode, phase
    }

    func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    static func line(_ report: SyncReport) -> String {
        let version = report.version?.description ?? "none"
        switch report.result {
        case .updated:
            return "\(report.app): updated \(report.previousVersion?.description ?? "none") -> \(version) via \(report.via?.rawValue ?? "?"), \(report.bytesDownloaded) bytes downloaded"
        case .upToDate: return "\(report.app): up-to-date at \(version)"
        case .throttled: return "\(report.app): throttled, next check \(report.nextCheck.map(RFC3339.string(from:)) ?? "later")"
        case .deferred: return "\(report.app): deferred until an unmetered network"
        case .held: return "\(report.app): held at \(version); nothing downloaded (offline-agent unhold)"
        case .knownBad: return "\(report.app): the offered version is marked bad here; \(version) stays active"
        case .failed: return "\(report.app): failed: \(report.error?.description ?? "unknown error"); \(version) stays active"
        }
    }
}
