import ArgumentParser
import CommandSupport
import Foundation
import Logging
import OfflineAgent
import OfflinePublish
import OfflineServer

/// `offline-server`: serves a publish directory over HTTP (see `ReferenceServer`).
@main
struct OfflineServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offline-server",
        abstract: "Serve a publish directory to offline-agent per docs/PROTOCOL.md.",
        discussion: """
            GET /manifest?app=NAME&current=VERSION (or /NAME/manifest?current=VERSION) answers a \
            patch manifest when the latest version has a patch from VERSION, else the full package; \
            GET /NAME/FILE serves the published files with Range support; GET /metrics gives \
            Prometheus counters (manifests, files by kind and status, bytes sent, errors, and the \
            fleet's). POST /report stores fleet report events (SQLite, or PostgreSQL shared by \
            several instances: --reports-db) and GET /stats?app=NAME sums them up per version. \
            --auto-halt halts a staged rollout by itself when its reports trip the rules \
            (docs/PROTOCOL.md, "Automatic halt"). Reports need --report-token (devices enrol with it \
            at POST /enrol; --require-enrolment takes only their own credentials) or, from anyone, \
            --open-collector. --timestamp-key keeps a TUF repository's metadata/timestamp.json fresh \
            (docs/PUBLISHING.md, "Freshness"). Prints \
            'listening on HOST:PORT' once bound (useful with --port 0) and one log line per \
            request on stderr. Stops on SIGINT/SIGTERM.
            """,
        subcommands: [CopyReportsCommand.self, ReenrolCommand.self]
    )

    // Optional to the parser only, so `copy-reports` runs without it; serving requires it (run()).
    @Option(help: "The publish directory (written by `offline-publish publish`); required to serve.") var dir: String?
    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to bind; 0 picks a free one.") var port = 8080
    @Option(help: "Ed25519 private key file: sign every manifest (X-Offline-Signature).") var key: String?
    @Option(help: "TUF: auto-halt with this key alone (each app's halt role, from offline-publish delegate --halt-key; it signs snapshot and timestamp too), never the manifest's key.")
    var haltKey: String?
    @Option(help: "The TUF timestamp role's Ed25519 private key file, a key the root names for that role alone: keep metadata/timestamp.json fresh, re-signing it with half of --timestamp-expires left (a key that also holds root, targets or snapshot is refused).")
    var timestampKey: String?
    @Option(help: "How long each timestamp the server signs is valid: a duration like 1d or 12h (default 1d, at least 2s).")
    var timestampExpires: String?
    @Option(help: "How full packages are offered: gzip (the .zip.gz) or none (the .zip).") var compression = "gzip"
    @Option(help: "Seconds a CDN or proxy may cache manifests and .sig files (Cache-Control max-age); packages and patches are immutable.")
    var manifestMaxAge = 60
    @Option(help: "Where fleet reports are stored (POST /report, GET /stats): a SQLite file, default ~/.local/state/offline-server/NAME-HASH/reports.sqlite (outside the publish directory; a database in the old place, DIR/.offline-server/reports.sqlite, is still used, with a warning), or postgres://USER:PASSWORD@HOST:PORT/DB (shared by several instances; add ?sslmode=require for TLS).")
    var reportsDb: String?
    @Option(help: "Halt the staged rollout of an app's latest version when its reports trip these rules, e.g. failure-rate>5%,rollback-rate>2%,min-devices=20,window=1h; re-signed with --key.")
    var autoHalt: String?
    @Option(help: "The fleet's bearer token: POST /report takes it (Authorization: Bearer TOKEN; devices: reportToken in their config), and POST /enrol takes it to give each device a credential of its own.")
    var reportToken: String?
    @Flag(help: "Take reports only with a device's own credential (from POST /enrol), not the shared --report-token; only those devices count toward --auto-halt.")
    var requireEnrolment = false
    @Option(help: "The file of the secret device credentials derive from, created mode 0600 when missing; default: collector-secret beside the SQLite database unless that is in the publish directory, else in the default state directory, as with PostgreSQL (give every instance sharing a database the same file).")
    var collectorSecret: String?
    @Option(help: "Reports each enrolled device may send: N a minute (burst N), BURST/PERMINUTE, or off; past it 429 with Retry-After. The same limit holds per id for POST /enrol and for shared-token reports per device id they name.")
    var deviceRateLimit = "60/60"
    @Flag(help: "Collect reports without any token: anyone who reaches the server may report, for any device id (never the default).")
    var openCollector = false
    @Option(help: "A JSON file of settings: reportsDb, autoHalt, reportToken, collectorSecret (the options of the same names win).")
    var config: String?
    @Flag(help: "Turn fleet reports off: POST /report and GET /stats answer 404.") var noReports = false
    @Option(help: "trace, debug, info, notice, warning, error or critical.") var logLevel = "info"
    @Option(help: "Inject a fault, for testing clients (repeatable): FAULT[@SCOPE][*COUNT], e.g. latency=500ms, status=503:retry-after=60@manifest, truncate=0.5@package*1, corrupt=patch, reset-after=64k, stall=2s; see README.")
    var fault: [String] = []

    static func main() async {
        DryParse.exitIfAsked(Self.self)
        await main(nil)
    }

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else { throw ValidationError("unknown log level '\(logLevel)'") }
        guard let fullCompression = Manifest.Compression(rawValue: compression) else {
            throw ValidationError("compression must be 'gzip' or 'none'")
        }
        guard manifestMaxAge >= 0 else { throw ValidationError("--manifest-max-age must be 0 or more") }
        guard let dir else { throw ValidationError("Missing expected argument '--dir <dir>'") }
        let timestampLifetime = try timestampExpires.map { text in
            guard let seconds = ManifestStageStep.parseDuration(text), TimeInterval(seconds) >= TimestampKeeping.minimumLifetime else {
                throw ValidationError("--timestamp-expires '\(text)' is not a duration of 2s or more like 1d or 12h")
            }
            return TimeInterval(seconds)
        }
        guard timestampKey != nil || timestampExpires == nil else { throw ValidationError("--timestamp-expires needs --timestamp-key") }
        guard FileManager.default.fileExists(atPath: dir) else { throw ValidationError("no such directory: \(dir)") }
        let file = try config.map(ServerConfigFile.init(path:)) ?? ServerConfigFile()
        let reportsDb = self.reportsDb ?? file.reportsDb
        let autoHalt = self.autoHalt ?? file.autoHalt
        let reportToken = self.reportToken ?? file.reportToken
        let collectorSecret = self.collectorSecret ?? file.collectorSecret
        guard !(noReports && reportsDb != nil) else { throw ValidationError("--reports-db and --no-reports exclude each other") }
        guard !(noReports && autoHalt != nil) else { throw ValidationError("--auto-halt needs fleet reports: drop --no-reports") }
        if let reportToken {
            guard ReportToken.isValid(reportToken) else {
                throw ValidationError("--report-token must be \(ReportToken.rule)")
            }
        }
        guard !requireEnrolment || reportToken != nil else {
            throw ValidationError("--require-enrolment needs --report-token: devices enrol with it")
        }
        guard !(openCollector && reportToken != nil) else {
            throw ValidationError("--open-collector and --report-token exclude each other")
        }
        let deviceLimit: ReportRateLimit?
        if deviceRateLimit == "off" {
            deviceLimit = nil
        } else if let limit = ReportRateLimit(parsing: deviceRateLimit) {
            deviceLimit = limit
        } else {
            throw ValidationError("--device-rate-limit must be N, BURST/PERMINUTE or off")
        }
        // An open collector is never the default: asked for a collector (a database, rules)
        // without a token, the start is refused; asked for nothing, reports stay off.
        var reportsOff = noReports
        if !noReports, reportToken == nil, !openCollector {
            guard reportsDb == nil, autoHalt == nil else {
                throw ValidationError("""
                    a collector needs --report-token TOKEN (devices enrol with it; add --require-enrolment once they have) \
                    or, to take reports from anyone, --open-collector
                    """)
            }
            reportsOff = true
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let signingKey: SigningKey?, haltSigningKey: SigningKey?, faults: [ServerFault], rules: AutoHaltRules?
        let timestampSigningKey: SigningKey?
        do {
            haltSigningKey = try haltKey.map(SigningKey.init(contentsOfFile:))
            rules = try autoHalt.map(AutoHaltRules.init(parsing:))
            faults = try fault.map(ServerFault.init(parsing:))
            signingKey = try key.map(SigningKey.init(contentsOfFile:))
            timestampSigningKey = try timestampKey.map(SigningKey.init(contentsOfFile:))
        } catch {
            FileHandle.standardError.write(Data("offline-server: \(error)\n".utf8))
            throw ExitCode(64)
        }
        if reportsOff, !noReports {
            Logger(label: "offline-server").notice(
                "fleet reports are off: start with --report-token TOKEN to collect them (or --open-collector to take them from anyone)")
        }
        var database = reportsDb
        if database == nil, !reportsOff {
            let (path, warning) = ReportDatabaseLocation.defaultPath(directory: dir)
            if let warning { Logger(label: "offline-server").warning("\(warning)") }
            database = path
        }
        var configuration = ReferenceServer.Configuration(
            directory: dir, host: host, port: port, signingKey: signingKey, fullCompression: fullCompression,
            manifestMaxAge: manifestMaxAge, reportsDatabase: database)
        configuration.faults = faults
        configuration.timestampKeeping = timestampSigningKey.map {
            TimestampKeeping(key: $0, lifetime: timestampLifetime ?? TimestampKeeping.defaultLifetime)
        }
        configuration.autoHalt = rules
        configuration.haltKey = haltSigningKey
        configuration.reportToken = reportToken
        configuration.requireEnrolment = requireEnrolment
        configuration.deviceRateLimit = deviceLimit
        configuration.collectorSecret = collectorSecret
        if collectorSecret == nil, reportToken != nil, let database {
            let found = ReportDatabaseLocation.secretPath(directory: dir, database: database, databaseGiven: reportsDb != nil)
            if let warning = found.warning { Logger(label: "offline-server").warning("\(warning)") }
            configuration.collectorSecret = found.path
        }
        let server = ReferenceServer(configuration: configuration, logger: Logger(label: "offline-server"))
        // One line and its exit status (64 usage, 1 otherwise) for what fails once running.
        try await reportingFailures(tool: "offline-server") {
            try await server.run(stopOnSignals: true) { host, port in
                // Written unbuffered: a parent process waits for this line to learn the port.
                FileHandle.standardOutput.write(Data("listening on \(host):\(port)\n".utf8))
            }
        }
    }
}
