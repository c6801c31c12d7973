import Foundation
import Hummingbird
import Logging
import OfflineAgent
import OfflineHTTP
import OfflinePublish
import ServiceLifecycle

/// The reference offline-package server: serves a publish directory (as written by
/// `offline-publish publish`) per `docs/PROTOCOL.md`.
///
/// - `GET /manifest?app=NAME&current=VERSION`: a patch manifest when `current` is
///   one of the versions the latest has a patch from (the last 3), else the full
///   package, and lists every patch to the latest in `patches`; URLs are relative to the manifest URL (`NAME/1.2.0-1.3.0.bsdiff`).
///   `GET /NAME/manifest?current=VERSION` answers the same with URLs beside it.
///   Strong ETag from the body, `If-None-Match` → 304, `X-Offline-Signature` with
///   a key; 400 for a bad app name or version, 404 for an unknown app.
/// - `GET /NAME/FILE`: the published files — `V.zip`, `V.zip.gz`, `A-B.bsdiff`,
///   `manifest.json`, `manifest.json.sig` — with `Range`, `If-Range` and 416;
///   `state.json` and anything else is 404.
/// - `GET /metrics`: this server's counters in the Prometheus text format (see
///   `ReferenceServerMetrics`), and the fleet counters when reports are on.
/// - `POST /report`, `GET /stats?app=NAME`, `GET /dashboard[?app=NAME]`: the fleet
///   report collector, when `reportsDatabase` is set (SQLite, or PostgreSQL shared by
///   several servers), with `autoHalt` halting a staged rollout its reports condemn
///   (docs/PROTOCOL.md, "Fleet reports", "Automatic halt"; docs/FLEET.md). With a
///   `reportToken`, `POST /enrol` gives each device a credential of its own
///   (docs/PROTOCOL.md, "Enrolment"); both take `application/json` only.
/// - `Cache-Control`: manifests and `.sig` `public, max-age=<manifestMaxAge>`
///   (revalidated by ETag afterwards); packages and patches, whose names are
///   versions and never change, `public, max-age=31536000, immutable`; errors `no-store`.
///
/// `state.json` is looked at on every request (one `stat`), so a new publish is
/// served at once. Full packages are offered gzip-compressed (`compression: gzip`,
/// the `.zip.gz`) unless `fullCompression` is `.none`.
public struct ReferenceServer: Sendable {
    /// Where to listen and what to serve.
    public struct Configuration: Sendable {
        /// The publish directory.
        public var directory: String
        /// Address to bind; loopback unless asked otherwise.
        public var host: String
        /// Port to bind; 0 picks a free one (see `start()` / `run(onListening:)`).
        public var port: Int
        /// Signs every manifest body (header `X-Offline-Signature`) when set.
        public var signingKey: SigningKey?
        /// How full packages are offered: `.gzip` (the `.zip.gz`) or `.none` (the `.zip`).
        public var fullCompression: Manifest.Compression
        /// `Cache-Control: max-age` of manifests and `.sig` files, in seconds: how long a
        /// CDN or proxy may answer for the server, so the longest a new version waits
        /// behind it. Versioned packages and patches never change and are cached for a year.
        public var manifestMaxAge: Int
        /// Where fleet reports are stored (`POST /report`, `GET /stats`): a SQLite database
        /// path, created if missing, or a `postgres://` URL (several servers may share one);
        /// nil turns reports off (both answer 404).
        public var reportsDatabase: String?

        /// Halts the staged rollout of an app's latest version by itself when its reports
        /// trip these rules (`--auto-halt`; see `AutoHaltRules`); nil: never. Needs reports.
        public var autoHalt: AutoHaltRules?
        /// TUF: `autoHalt` halts with this key alone, the key of the app's halt role
        /// (`offline-publish delegate --halt-key`), which also signs snapshot and timestamp:
        /// it writes `APP/rollout.json`, never the manifest (`--halt-key`). nil: halts re-sign
        /// the manifest with `signingKey`.
        public var haltKey: SigningKey?
        /// The fleet's bearer token `POST /report` requires (`Authorization: Bearer TOKEN`),
        /// and `POST /enrol` takes to hand a device its own credential; nil: any sender is
        /// accepted (an open collector).
        public var reportToken: String?
        /// Where the secret device credentials derive from is kept (created 0600 when
        /// missing); nil: beside a SQLite reports database, else (PostgreSQL) a secret of
        /// this process only. Used with `reportToken`.
        public var collectorSecret: String?
        /// Refuse reports sent with the shared `reportToken`: only enrolled devices, each
        /// with its own credential, report (`--require-enrolment`), and only they count
        /// toward `autoHalt`.
        public var requireEnrolment = false
        /// Requests each enrolled device may send to `POST /report` (`429` past it); nil: unlimited.
        public var deviceRateLimit: ReportRateLimit? = .perDevice

        /// Faults to inject, for testing clients (`--fault`; see `ServerFault`). None by default.
        public var faults: [ServerFault] = []

        /// Keeps `metadata/timestamp.json` fresh with the timestamp key alone
        /// (`--timestamp-key`; see `TimestampKeeping`); nil: never signs metadata.
        public var timestampKeeping: TimestampKeeping?

        /// How long a connection may send nothing, before its request is whole or between
        /// requests, before it is closed. Without it a connection that sends a request's
        /// head and part of its body, or nothing at all, is held for ever: a thousand of
        /// them take every file descriptor a default limit allows, and no device gets a
        /// manifest. A response being written is never cut.
        public var idleTimeout: Duration = Self.defaultIdleTimeout
        /// The default `idleTimeout`: 60 s, above any pause of a real client mid-request.
        public static let defaultIdleTimeout: Duration = .seconds(60)

        public init(
            directory: String, host: String = "127.0.0.1", port: Int = 8080,
            signingKey: SigningKey? = nil, fullCompression: Manifest.Compression = .gzip, manifestMaxAge: Int = 60,
            reportsDatabase: String? = nil
        ) {
            self.reportsDatabase = reportsDatabase
            self.directory = directory
            self.host = host
            self.port = port
            self.signingKey = signingKey
            self.fullCompression = fullCompression
            self.manifestMaxAge = max(0, manifestMaxAge)
        }
    }

    public let configuration: Configuration
    /// Receives one `info` line per request and Hummingbird's own messages.
    public let logger: Logger
    /// The server's counters, also served at `GET /metrics`.
    public let metrics: ReferenceServerMetrics

    public init(configuration: Configuration, logger: Logger = Logger(label: "offline-server")) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = ReferenceServerMetrics()
    }

    /// Runs until the task is cancelled or, with `stopOnSignals`, SIGTERM/SIGINT
    /// arrives (then open requests are finished first).
    ///
    /// - Parameter onListening: called once with the bound host and port.
    public func run(
        stopOnSignals: Bool = false,
        onListening: @escaping @Sendable (_ host: String, _ port: Int) async -> Void = { _, _ in }
    ) async throws {
        await repairPublishDirectory()
        let keeping = try await keepTimestamp()
        defer { keeping?.cancel() }
        let catalog = makeCatalog()
        let reports = try await openReports(catalog: catalog)
        do {
            try await ServiceRunner.run(
                makeApplication(catalog: catalog, reports: reports, onListening: onListening), stopOnSignals: stopOnSignals,
                logger: logger)
        } catch {
            await reports?.store.close()
            throw error
        }
        await reports?.store.close()
    }

    /// Starts the server in the background and returns once it listens: the
    /// in-process form for tests (use port 0 and read `port`).
    public func start() async throws -> RunningReferenceServer {
        await repairPublishDirectory()
        let keeping = try await keepTimestamp()
        let catalog = makeCatalog()
        let service: BackgroundService, reports: ReportCollector?
        do {
            reports = try await openReports(catalog: catalog)
            service = try await ServiceRunner.start(logger: logger) {
                makeApplication(catalog: catalog, reports: reports, onListening: $0)
            }
        } catch {
            keeping?.cancel()
            throw error
        }
        return RunningReferenceServer(host: configuration.host, metrics: metrics, service: service) {
            keeping?.cancel()
            await reports?.store.close()
        }
    }

    /// With `timestampKeeping`: refuses a key that is not the timestamp key alone
    /// (`.usage`), re-signs a due timestamp before anything is served, then keeps it fresh
    /// in a task of its own, which the caller cancels when the server stops.
    private func keepTimestamp() async throws -> Task<Void, Never>? {
        guard let keeping = configuration.timestampKeeping else { return nil }
        let keeper = try TimestampKeeper(directory: configuration.directory, keeping: keeping, logger: logger)
        let wait = await keeper.round()
        return Task {
            try? await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
            await keeper.run()
        }
    }

    /// The report collector when configured: the database opened and the counters restored from it.
    /// Opens (creating and migrating, with its fsyncs) the reports database on a thread
    /// of its own, not one of the cooperative pool the requests run on.
    private func openReports(catalog: ReferenceServerCatalog) async throws -> ReportCollector? {
        guard let location = configuration.reportsDatabase else { return nil }
        let store: any ReportStorage
        if PostgresReportStore.isURL(location) {
            store = try await PostgresReportStore.open(url: location, logger: logger)
        } else {
            try Self.checkPath(location)
            store = try await ReportStore.open(path: location)
        }
        do {
            var access = ReportAccess(
                fleetToken: configuration.reportToken, secret: nil, requireEnrolment: configuration.requireEnrolment,
                deviceLimit: configuration.deviceRateLimit)
            if configuration.reportToken != nil {
                if let path = configuration.collectorSecret ?? (PostgresReportStore.isURL(location) ? nil : Self.secretPath(beside: location)) {
                    access.secret = try CollectorSecret.load(path: path)
                    logger.info("collector secret in \(path)")
                } else {
                    access.secret = CollectorSecret.random()
                }
            }
            return try await ReportCollector(
                store: store, catalog: catalog, autoHalt: configuration.autoHalt, access: access, logger: logger)
        } catch {
            await store.close()
            throw error
        }
    }

    /// Refuses (`.usage`) a `--reports-db` that is a URL of another kind (`sqlite://…`,
    /// `mysql://…`, `postgres:/…` with one slash): read as a file path, it made a SQLite
    /// database in a directory named after the scheme, and the server started as if all
    /// were well. Only the scheme is named: the rest may hold a password.
    static func checkPath(_ location: String) throws {
        let scheme = location.prefix { $0 != ":" && $0 != "/" }
        let isScheme = !scheme.isEmpty && scheme.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }
        guard isScheme, location.dropFirst(scheme.count).hasPrefix(":") else { return }
        let lower = scheme.lowercased()
        guard location.dropFirst(scheme.count).hasPrefix("://") || lower == "postgres" || lower == "postgresql" else { return }
        throw ServerError(
            .usage, "--reports-db \(scheme):…: not a database the server opens; give a SQLite file path, or postgres://USER:PASSWORD@HOST:PORT/DATABASE")
    }

    /// Whether a reports database location names PostgreSQL rather than a SQLite file.
    public static func isPostgres(_ location: String) -> Bool { PostgresReportStore.isURL(location) }

    /// `collector-secret` in the directory of the SQLite database at `database`.
    public static func secretPath(beside database: String) -> String {
        FileSystem.parent(of: URL(fileURLWithPath: database).standardizedFileURL.path) + "/collector-secret"
    }

    /// Finishes or undoes what a publisher verb a crash cut short left in the publish
    /// directory (`PublishRecovery`), before anything is served; on a thread of its own,
    /// as it renames and fsyncs. Never fails the start: problems are logged.
    private func repairPublishDirectory() async {
        let directory = configuration.directory
        let lines = (try? await OwnThread.run { PublishRecovery.recoverAll(publishDirectory: directory) }) ?? []
        for line in lines { logger.warning("publish directory: \(line)") }
    }

    private func makeCatalog() -> ReferenceServerCatalog {
        var metadataExpiry = TUFExpiry()
        if let keeping = configuration.timestampKeeping { metadataExpiry.timestamp = keeping.lifetime }
        return ReferenceServerCatalog(
            directory: URL(fileURLWithPath: configuration.directory).standardizedFileURL.path, signingKey: configuration.signingKey,
            haltKey: configuration.haltKey, fullCompression: configuration.fullCompression, metadataExpiry: metadataExpiry)
    }

    /// `duration` in whole nanoseconds, at least 1 ms and at most a day.
    static func nanoseconds(_ duration: Duration) -> Int64 {
        let bounded = min(max(duration, .milliseconds(1)), .seconds(86_400))
        return bounded.components.seconds * 1_000_000_000 + bounded.components.attoseconds / 1_000_000_000
    }

    private func makeApplication(
        catalog: ReferenceServerCatalog, reports: ReportCollector?,
        onListening: @escaping @Sendable (String, Int) async -> Void
    ) -> some Service {
        let host = configuration.host
        return Application(
            responder: FaultingResponder(
                base: ReferenceServerResponder(
                    catalog: catalog, logger: logger, metrics: metrics, manifestMaxAge: configuration.manifestMaxAge,
                    reports: reports),
                injector: FaultInjector(configuration.faults, metrics: metrics)),
            server: .http1(configuration: .init(idleTimeout: .nanoseconds(Self.nanoseconds(configuration.idleTimeout)))),
            configuration: .init(address: .hostname(host, port: configuration.port), serverName: "offline-server"),
            onServerRunning: { channel in await onListening(host, channel.localAddress?.port ?? 0) },
            logger: logger)
    }
}
