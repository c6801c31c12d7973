import ArgumentParser
import FoundationEssentials
import Logging
import NIOCore
import OfflineAgent
import OfflineDBus
import OfflineServe
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the active offline packages to a web view on a loopback HTTP server.",
        discussion: """
            GET /<app>/<path> serves a file of the app's active version; GET /open?url=<percent-encoded URL> \
            redirects to the local copy when the URL is served offline, else to the URL itself; \
            GET /session/restore?history=<JSON> rebuilds a web view's back/forward list on \
            /session/item?url=<URL> entries, which redirect like /open (see `session-url`); \
            GET /metrics gives Prometheus counters. Each /open and /session/restore of a version on trial counts \
            a launch; POST /.offline-agent/mark-good?app=NAME (or mark-bad) from the page confirms or rolls back. Prints "listening on http://HOST:PORT" on stdout once \
            bound (useful with --port 0). Stops gracefully on SIGTERM or SIGINT.
            An app whose active version is below the known miniVersion, or outside rollout for this device, \
            is not served on any route: /<app>/… answers 302 to the whitelisted network URL instead.
            Hostile clients: at most --max-connections at once (more get 503), a request head must arrive \
            within --header-timeout seconds, and a connection idle for --idle-timeout seconds is closed.
            Exit status: 0 stopped by a signal; 1 failed (e.g. the port is taken: "serve: cannot serve on \
            HOST:PORT: address in use"); 64 usage.
            """
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The port to listen on; 0 picks a free one.") var port: Int = 8421
    @Option(help: "The address to listen on (loopback unless --allow-remote).") var host: String = "127.0.0.1"
    @Option(help: "The device id for rollout (the root's stable id when absent).") var deviceId: String?
    @Flag(help: "Allow a non-loopback --host and accept any Host header (turns off the DNS-rebinding check). Peers not on loopback may only read packages: mirror hosts, lifecycle control and /metrics answer loopback peers only.")
    var allowRemote = false
    @Flag(help: "Log one line per request on stderr.") var verbose = false
    @Option(help: "Launches (/open, /session/restore) a version on trial may have unconfirmed before it is rolled back (default: what its install recorded; 0: never). Versions not on trial are never rolled back.")
    var maxTrialLaunches: Int?

    @Option(help: "At most this many connections at once (lowered to fit the descriptor limit).")
    var maxConnections: Int = 256
    @Option(help: "Seconds a connection has to send a complete request head.") var headerTimeout: Double = 10
    @Option(help: "Seconds a connection may stay idle (no request, or a response not being read).")
    var idleTimeout: Double = 60
    @Option(help: "Send usage reports (offline hits, network fallbacks by reason, per app and version) to this collector URL; default: the collector each app's syncs report to.")
    var report: String?
    @Option(help: "A file holding the bearer token the --report collector requires (offline-server --report-token); default: the token a sync recorded for that collector.")
    var reportTokenFile: String?
    @Option(help: "Also export the agent on D-Bus, as org.offlineagent.Agent1 on this bus: system or session (docs/DBUS.md). Prints \"dbus: NAME on the BUS bus\" once the name is owned.")
    var dbus: AgentBusConfiguration.Bus?
    @Option(help: "With --dbus: the sync config file (sync --config) naming the apps the D-Bus Sync method syncs, and per app the dbusUsers and dbusGroups that may confirm, report bad and sync it.")
    var config: String?
    @Option(help: "Minutes between usage reports (default 15).") var reportInterval: Double = 15
    @Option(help: "Seconds one fleet report request may take (default 3); past it, its events stay queued and the collector is backed off.")
    var reportDeadline: Double = 3

    func validate() throws {
        if let maxTrialLaunches, maxTrialLaunches < 0 { throw ValidationError("--max-trial-launches must be 0 or more") }
        if config != nil, dbus == nil { throw ValidationError("--config is read for --dbus only: give --dbus system or --dbus session") }
    }

    func run() async throws {
        #if canImport(Glibc)
        // Keep up to 8 MiB of freed heap instead of returning it at once: streaming
        // responses free and reallocate 64 KiB chunks, and trimming each time costs a
        // page fault per page on the next chunk (~20 % of the CPU of 1 MiB responses).
        Self.setMallocTrimThreshold(8 << 20)
        #endif
        Self.useTwoEventLoops()
        var logger = Logger(label: "offline-agent.serve") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .notice
        try await reportingFailures {
            // Bounded so the conversion to milliseconds below can never trap (NaN fails too).
            guard (0.001...86_400).contains(headerTimeout), (0.001...86_400).contains(idleTimeout) else {
                throw OfflineAgentError(.usage, "--header-timeout and --idle-timeout must be positive numbers of seconds, at most 86400")
            }
            let server = try LocalServer(
                configuration: .init(
                    root: try ExistingRoot.url(root, phase: .serve).path, host: host, port: port, deviceID: deviceId, allowRemote: allowRemote,
                    maxTrialLaunches: maxTrialLaunches, maxConnections: maxConnections,
                    headerTimeout: .milliseconds(Int64((headerTimeout * 1000).rounded(.up))),
                    idleTimeout: .milliseconds(Int64((idleTimeout * 1000).rounded(.up)))),
                logger: logger)
            guard (1.0 / 60...1440).contains(reportInterval) else {
                throw OfflineAgentError(.usage, "--report-interval must be between 1/60 and 1440 minutes")
            }
            guard (0.1...600).contains(reportDeadline) else {
                throw OfflineAgentError(.usage, "--report-deadline must be between 0.1 and 600 seconds")
            }
            var reportSettings = ReportSettings()
            reportSettings.deadline = .milliseconds(Int64(reportDeadline * 1000))
            let reportURL = try SyncCommand.reportURL(report)
            if let token = try SyncCommand.reportToken(file: reportTokenFile, report: reportURL), let reportURL {
                // Recorded with the queue as a sync records it, so every flush of it sends the
                // token; without the option, the token a sync recorded stays. A root it cannot be
                // written to still serves.
                do {
                    try ReportQueue(root: server.configuration.root, url: reportURL, maxEvents: reportSettings.maxQueuedEvents).remember(token: token)
                } catch {
                    logger.warning("the fleet-report token for \(reportURL.absoluteString) is not recorded: \(error)")
                }
            }
            let reporter = try LocalUsageReporter(
                metrics: server.metrics, root: server.configuration.root, report: reportURL,
                interval: .milliseconds(Int64(reportInterval * 60_000)), settings: reportSettings, logger: logger)
            // Read before the server starts: a config that does not load is a usage error.
            let busSettings = try dbus.map { bus in
                try DBusHost.configuration(bus: bus, root: server.configuration.root, port: port, deviceID: deviceId, config: config)
            }
            let busHost = DBusHost()
            let busLogger = logger
            let reporting = Task { await reporter.run() }
            do {
                defer { reporting.cancel() }
                try await server.run(stopOnSignals: true) { host, port in
                    // Flushed: a parent reading the pipe sees the line at once.
                    fputs("listening on http://\(WebAddress.authority(host: host, port: port))\n", stdout)
                    fflush(stdout)
                    if var busSettings {
                        busSettings.servePort = port
                        busHost.start(busSettings, logger: busLogger)
                    }
                }
            } catch let error as OfflineAgentError {
                await busHost.stop()
                throw error
            } catch {
                await busHost.stop()
                throw OfflineAgentError(.serve, "cannot serve on \(host):\(port): \(error)", cause: .unexpected)
            }
            await busHost.stop()
            // The last period's counts go out when the server stops (the reporter's final flush).
            await reporting.value
        }
    }

    /// Two event loops (one on a single core) and one blocking thread, instead of one of
    /// each per core (NIO's singletons): every extra thread stays resident for the
    /// server's life (its stack and its malloc arena), while a page loading its files over
    /// several connections at once is answered on two cores. Two loops against one: 0.70–0.76×
    /// nginx's rate on a 30 KB file against 0.53–0.58×, for 0.2 MiB more idle RSS
    /// (`bench/serve.sh`, README "Performance"). The environment (`NIO_SINGLETON_GROUP_LOOP_COUNT`,
    /// `NIO_SINGLETON_BLOCKING_POOL_THREAD_COUNT`) still wins.
    static func useTwoEventLoops() {
        if getenv("NIO_SINGLETON_GROUP_LOOP_COUNT") == nil { NIOSingletons.groupLoopCountSuggestion = min(2, System.coreCount) }
        if getenv("NIO_SINGLETON_BLOCKING_POOL_THREAD_COUNT") == nil { NIOSingletons.blockingPoolThreadCountSuggestion = 1 }
    }

    #if canImport(Glibc)
    /// glibc's `mallopt(M_TRIM_THRESHOLD, bytes)` (`<malloc.h>` is not in the Glibc module).
    static func setMallocTrimThreshold(_ bytes: Int32) {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let M_TRIM_THRESHOLD: Int32 = -1
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "mallopt") else { return }
        _ = unsafeBitCast(symbol, to: Mallopt.self)(M_TRIM_THRESHOLD, bytes)
    }
    #endif
}
