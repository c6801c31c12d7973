import ArgumentParser
import CommandSupport
import FoundationEssentials
import Logging
import OfflineAgent
import OfflineDBus
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

struct SyncCommand: AsyncParsableCommand {
    static let configuration: CommandConfiguration = {
        var configuration = baseConfiguration
        // `OfflineAgentCommand.main` parses `sync` on its own first. Naming the parent makes
        // that parse skip the root-only `--generate-completion-script` probe, which builds two
        // more commands by reflection on every cron run; the full tree never reads this field
        // of a subcommand, so help and usage are unchanged.
        configuration._superCommandName = OfflineAgentCommand.commandName
        return configuration
    }()

    private static let baseConfiguration = CommandConfiguration(
        commandName: "sync",
        abstract: "Check for a newer package and install it, crash-safely.",
        discussion: """
            Exit status: 0 updated, up-to-date, throttled, deferred, held, known-bad or not-in-stage; 1 failed (nothing installed changed); \
            64 usage; 75 another sync holds the lock.
            With --config FILE, every app listed in the JSON file is synced:
              {"root": "/var/lib/offline-agent", "publicKey": "BASE64", "network": "unmetered",
               "profile": "default", "maxTrialLaunches": 0, "manifestQuery": true,
               "apps": [{"app": "mall", "manifest": "https://h5.example.com/manifest", "publicKey": "BASE64", "profile": "alice"}]}
            "publicKeys" (a list, for key rotation: a manifest signed by any listed key verifies) may stand beside or instead of \
            "publicKey"; an app's own keys and profile win over the top-level ones, which win over --public-key. An app with no \
            key at all needs "allowUnsigned": true (top level or per app). Unknown keys and wrong types are usage errors \
            (exit 64); `offline-agent check-config FILE` checks a file without touching the network.
            "manifestQuery": false (top level or per app, like --no-manifest-query) requests the manifest URL exactly as \
            written, without app and current: use it for a static manifest.json behind a CDN, whose cache the parameters \
            would split by installed version.
            "report": "https://collector.example.com/report" (top level or per app, like --report) queues an event after \
            each sync that updated, failed or deferred and after each lifecycle transition, and posts the queue to that \
            URL within 3 seconds per run; a report failure never changes the sync's result.
            "reportToken": "TOKEN" (top level or per app, like --report-token-file) is the bearer token a collector \
            started with --report-token requires; it is recorded with that collector's queue (mode 0600) for later \
            lifecycle and serve reports, sent to that URL only, and never printed. Keep the config file mode 0600.
            --network auto (the default) asks NetworkManager (nmcli) whether the connection is metered when a manifest \
            wants an unmetered network, and assumes unmetered, with one log line, where it cannot be read.
            Trials: a version is on trial (rolled back unless confirmed by mark-good within N launches) only when its \
            manifest asks (its publisher's trial request, docs/PUBLISHING.md). --max-trial-launches N (or "maxTrialLaunches", \
            top level or per app) turns trials on for a host that confirms, whatever the manifest asks; 0 turns them off.
            Without a trusted key (--public-key, or a key in the config file) sync refuses to run: give --allow-unsigned \
            (or "allowUnsigned": true) to accept unsigned manifests.
            Ctrl-C or SIGTERM stops the sync: each app says what it kept (a partial download resumes on the next run, \
            which is not throttled), and the exit status is 130 (SIGINT) or 143 (SIGTERM). An extraction already under way \
            completes: its app says updated, and when nothing else was stopped the exit status is the results' own.
            The apps are checked 4 at a time; their lines come out in the file's order.
            Each app ends with one line on stderr (or one JSON object on stdout with --json); --verbose adds logs and progress.
            Requests carry and store cookies in the profile's jar (<root>/profiles/<name>/cookies.json); \
            profiles never see each other's cookies. See `offline-agent cookies`.
            Failures name a stable error code (--json: errorCode), listed in docs/PROTOCOL.md, "Error codes".
            """
    )

    @Option(help: "The agent's root directory.") var root: String?
    @Option(help: "The app to sync.") var app: String?
    @Option(help: "The manifest URL.") var manifest: String?
    @Option(help: "A JSON file listing apps to sync (see above).") var config: String?
    @Flag(help: "Check now: skip the 5-minute throttle, any Retry-After wait and the failure backoff.") var force = false
    @Flag(help: "Log each step on stderr.") var verbose = false
    @Flag(help: "Print one JSON object per app on stdout.") var json = false
    @Option(help: "Require manifests signed by this Ed25519 public key: base64, or the path of a file holding it.") var publicKey: String?
    @Option(help: "The network the device is on: auto (ask NetworkManager whether the connection is metered; the default), metered or unmetered.")
    var network: NetworkPolicy?
    @Option(help: "Send fleet reports (updated, failed, deferred, rollbacks, marks) to this collector URL (docs/PROTOCOL.md, \"Fleet reports\").")
    var report: String?
    // A file, not the token itself: a command line is visible to every user in ps.
    @Option(help: "A file holding the bearer token the --report collector requires (offline-server --report-token); recorded for later reports.")
    var reportTokenFile: String?
    // The two defaults below are applied in code, not given to ArgumentParser: a default
    // value is described for help on every parse, through runtime conformance lookups that
    // each scan the whole binary, and `sync` mostly runs as a throttled no-op from cron.
    @Option(help: "Seconds one fleet report request may take (default 3); past it, its events stay queued and the collector is backed off.")
    var reportDeadline: Double?
    @Option(help: "The cookie profile whose jar the requests use (default: \(CookieProfile.defaultName)).") var profile: String?
    @Option(help: "Put every new version on trial for N launches, rolled back unless confirmed (for a host that confirms); 0: no trials. Default: as the manifest asks.")
    var maxTrialLaunches: Int?
    @Option(help: "Trust the TUF repository the manifest URL (<base>/APP/manifest.json) is in from this root file (its metadata/1.root.json); replaces --public-key and --allow-unsigned (docs/PROTOCOL.md, \"TUF repository\").")
    var trustedRoot: String?
    @Flag(help: "Accept unsigned manifests when no --public-key is given (the config file's \"allowUnsigned\": true).")
    var allowUnsigned = false
    @Flag(help: "Request the manifest URL as written, without the app and current query parameters (a static manifest behind a CDN).")
    var noManifestQuery = false
    @Option(help: "The device id that places this device in staged rollouts (default: <root>/device-id); give the same to resolve, status and serve.")
    var deviceId: String?

    func validate() throws {
        if config == nil {
            guard root != nil, app != nil, manifest != nil else {
                throw ValidationError("give --root, --app and --manifest, or --config FILE")
            }
        } else if app != nil || manifest != nil {
            throw ValidationError("--config cannot be combined with --app or --manifest")
        }
        if let maxTrialLaunches, maxTrialLaunches < 0 { throw ValidationError("--max-trial-launches must be 0 or more") }
        guard (0.1...600).contains(deadline) else { throw ValidationError("--report-deadline must be between 0.1 and 600 seconds") }
    }

    /// `--report-deadline` when not given, in seconds.
    static let defaultReportDeadline = 3.0

    /// `--report-deadline`, or its default.
    private var deadline: Double { reportDeadline ?? Self.defaultReportDeadline }
    /// `--profile`, or the default profile (a config file's apps may name their own).
    private var profileName: String { profile ?? CookieProfile.defaultName }

    /// Apps of one root checked at the same time by `--config`.
    static let concurrency = 4

    func run() async throws {
        let verbose = verbose
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            // Without --verbose a sync says its one summary line, plus warnings that need a person.
            handler.logLevel = verbose ? .debug : .warning
            return handler
        }
        let jobs = try await reportingFailures { try loadJobs() }
        let interruption = SyncInterruption()
        var worst: Int32 = 0
        // Whether the signal stopped anything: a sync it cancelled, or a root never started.
        // One that came as the last install was completing stopped nothing: that install's
        // line says updated, and the status is the results' own.
        var interrupted = false
        // One agent and one batch per root (a config has one root): the batch holds the
        // root's lock once and runs its apps concurrently.
        var roots: [String] = []
        for job in jobs where !roots.contains(job.root) { roots.append(job.root) }
        for root in roots {
            guard interruption.caught == 0 else {
                interrupted = true
                break
            }
            let batch = jobs.filter { $0.root == root }
            var configuration = AgentConfiguration()
            configuration.reporting.deadline = .milliseconds(Int64(deadline * 1000))
            let agent = Agent(root: URL(fileURLWithPath: root), configuration: configuration)
            let requests = batch.map { job in
                SyncRequest(app: job.app, manifest: job.manifest,
                            options: job.options(force: force, deviceID: deviceId))
            }
            // The batch's own events: the stream ends with the batch, so every line is drawn.
            let sync = agent.startSync(requests, concurrency: Self.concurrency)
            interruption.watch { sync.cancel() }
            // --json is for programs: no line is drawn on the terminal either.
            // Progress for the D-Bus service, whose hosts hear of this sync too (docs/DBUS.md).
            let records = ProgressRecordWriter(root: root)
            let display = ProgressDisplay(
                events: sync.events, verbose: verbose, terminal: !json && isatty(STDERR_FILENO) == 1, record: records.note)
            let reports = await sync.value
            await display.finish()
            await agent.shutdown()
            for report in reports {
                let stopped = interruption.caught != 0 && report.error?.cause == .cancelled
                if stopped { interrupted = true }
                if json {
                    print(SyncJSON(report).encoded())
                } else if stopped {
                    let kept = AppName.isValid(report.app) ? agent.store.diskUsage(report.app).downloads : 0
                    printError(SyncJSON.interruptedLine(report, keptBytes: kept))
                } else {
                    let activeIsBad = report.result == .knownBad
                        && report.version.map { Lifecycle(store: agent.store).isBad(report.app, $0) } == true
                    printError(SyncJSON.line(report, activeIsBad: activeIsBad))
                }
                if let error = report.error { worst = max(worst, error.exitStatus) }
            }
        }
        if interrupted { throw ExitCode(interruption.exitStatus) }
        if worst != 0 { throw ExitCode(worst) }
    }

    struct Job {
        var root: String
        var app: String
        var manifest: URL
        var publicKeys: [String]
        var network: NetworkPolicy
        var profile: String
        var maxTrialLaunches: Int?
        var manifestQuery = true
        var report: URL?
        var reportToken: String?
        var allowedOrigins: [String]?
        /// The TUF root file's bytes; when set, the keys are not read.
        var trustedRoot: Data?

        func options(force: Bool, deviceID: String? = nil) -> SyncOptions {
            var options = SyncOptions(
                force: force, publicKeys: publicKeys, network: network.fixed ?? .unmetered, profile: profile,
                manifestQuery: manifestQuery, report: report)
            options.networkPolicy = network
            options.maxTrialLaunches = maxTrialLaunches
            options.reportToken = reportToken
            options.allowedOrigins = allowedOrigins
            options.deviceID = deviceID
            options.trustedRoot = trustedRoot
            return options
        }
    }

    /// `--report`: an http or https URL.
    static func reportURL(_ text: String?) throws -> URL? {
        guard let text else { return nil }
        guard let url = URL(string: text), WebAddress.webScheme(url.scheme) != nil, url.host != nil else {
            throw OfflineAgentError(.usage, "invalid report URL '\(text)': give an http or https URL")
        }
        return url
    }

    /// `--report-token-file`: the token the file holds (a trailing newline is not part of it), checked as the collector checks it.
    static func reportToken(file: String?) throws -> String? {
        guard let file else { return nil }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw OfflineAgentError(.usage, "--report-token-file cannot be read", path: file)
        }
        let token = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        guard ReportToken.isValid(token) else {
            throw OfflineAgentError(.usage, "--report-token-file must hold \(ReportToken.rule)", path: file)
        }
        return token
    }

    /// `--report-token-file` beside `--report` (sync without a config file, serve): the token goes with that URL only.
    static func reportToken(file: String?, report: URL?) throws -> String? {
        guard let token = try reportToken(file: file) else { return nil }
        guard report != nil else { throw OfflineAgentError(.usage, "--report-token-file needs --report: the token goes to that collector only") }
        return token
    }

    /// A TUF root file (`--trusted-root`, `trustedRoot`): its bytes, once they parse as root metadata.
    static func trustedRoot(file: String, key: String) throws -> Data {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw OfflineAgentError(.usage, "\(key) cannot be read", path: file)
        }
        do {
            _ = try TUFRoot(data)
        } catch let error as OfflineAgentError {
            throw OfflineAgentError(.usage, "\(key) is not TUF root metadata: \(error.reason)", path: file)
        }
        return data
    }

    /// `--public-key`: base64, or the path of a file holding it (a key file from `keygen` is base64 text).
    func commandLineKeys() throws -> [String] { try Self.keys(publicKey) }

    static func keys(_ publicKey: String?) throws -> [String] {
        guard let publicKey else { return [] }
        if (try? ManifestSignature.publicKey(base64: publicKey)) != nil { return [publicKey] }
        guard let data = FileManager.default.contents(atPath: publicKey) else {
            throw OfflineAgentError(.usage, "--public-key is neither base64 nor a readable file", path: publicKey)
        }
        let text = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        // Both halves of a key pair are 32 bytes of base64: the private one is told
        // apart by the public key `keygen` wrote beside it (FILE.pub).
        if let pair = FileManager.default.contents(atPath: publicKey + ".pub"),
           let derived = try? ManifestSignature.privateKey(base64: text).publicKey.rawRepresentation.base64EncodedString(),
           String(decoding: pair, as: UTF8.self).trimmingWhitespace() == derived {
            throw OfflineAgentError(
                .usage,
                "--public-key names a private key (its public key is \(publicKey).pub): give \(publicKey).pub, and keep the private key off devices",
                path: publicKey)
        }
        do {
            _ = try ManifestSignature.publicKey(base64: text)
        } catch {
            throw OfflineAgentError(.usage, "--public-key file does not hold base64 of a 32-byte Ed25519 public key", path: publicKey)
        }
        return [text]
    }

    /// The apps to sync, from the options or the config file (`serve --config` reads them too).
    func loadJobs() throws -> [Job] {
        guard let config else {
            guard let url = URL(string: manifest!), url.scheme != nil else {
                throw OfflineAgentError(.usage, "invalid manifest URL '\(manifest!)'")
            }
            let keys = try commandLineKeys()
            let trusted = try trustedRoot.map { try Self.trustedRoot(file: $0, key: "--trusted-root") }
            // The same rule as the config file: no key at all must be asked for by name.
            if keys.isEmpty, !allowUnsigned, trusted == nil {
                throw OfflineAgentError(
                    .usage,
                    "no trusted key: give --public-key KEY (base64, or the file offline-publish keygen wrote beside the private key) to verify signed manifests, or --allow-unsigned to accept unsigned ones")
            }
            let report = try Self.reportURL(report)
            let token = try Self.reportToken(file: reportTokenFile, report: report)
            return [Job(root: root!, app: app!, manifest: url, publicKeys: keys, network: network ?? .auto, profile: profileName,
                        maxTrialLaunches: maxTrialLaunches, manifestQuery: !noManifestQuery,
                        report: report, reportToken: token, trustedRoot: trusted)]
        }
        let (file, entries) = try ConfigFile.load(
            config, fallbackKeys: try commandLineKeys(), allowUnsigned: allowUnsigned, fallbackReport: try Self.reportURL(report),
            fallbackReportToken: try Self.reportToken(file: reportTokenFile),
            fallbackTrustedRoot: try trustedRoot.map { try Self.trustedRoot(file: $0, key: "--trusted-root") })
        return entries.map { entry in
            Job(root: root ?? file.root, app: entry.app, manifest: entry.manifest, publicKeys: entry.publicKeys,
                network: entry.network ?? network ?? .auto, profile: entry.profile ?? profileName,
                maxTrialLaunches: entry.maxTrialLaunches ?? file.maxTrialLaunches ?? maxTrialLaunches,
                manifestQuery: entry.manifestQuery ?? !noManifestQuery, report: entry.report, reportToken: entry.reportToken,
                allowedOrigins: entry.allowedOrigins, trustedRoot: entry.trustedRoot)
        }
    }
}
