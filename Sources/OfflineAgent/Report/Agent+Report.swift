import FoundationEssentials

extension Agent {
    /// Queues the fleet-report event of a finished sync: `updated`, `failed` or
    /// `deferred`. Up to date, throttled, held, known-bad and not-in-stage send nothing, nor does a
    /// sync that found the root busy or was cancelled (the host's doing). Also records
    /// the app's collector for later lifecycle events, and the collector's token with its
    /// queue (a throttled sync too, so a token fixed after a 401 is used by this very
    /// run's flush). Never fails the sync.
    nonisolated func queueReport(_ report: SyncReport, options: SyncOptions, duration: Duration) async {
        let app = report.app
        guard AppName.isValid(app) else { return }
        let url = options.report ?? configuration.report
        // The configuration's token belongs to the configuration's collector only.
        let token = options.reportToken ?? (options.report == nil ? configuration.reportToken : nil)
        let root = store.root
        let maxEvents = configuration.reporting.maxQueuedEvents
        if report.result == .throttled {
            // Reads one small file, writes only when the token changed: still file work, so off the cooperative pool.
            if let url {
                try? await pool.run(.install, cancellable: false) {
                    self.rememberToken(token, queue: ReportQueue(root: root, url: url, maxEvents: maxEvents), app: app)
                }
            }
            return
        }
        let kind: ReportEvent.Kind?
        switch report.result {
        case .updated: kind = .updated
        case .deferred: kind = .deferred
        case .failed where report.error?.cause != .busy && report.error?.cause != .cancelled: kind = .failed
        default: kind = nil
        }
        let clock = configuration.clock
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        do {
            try await pool.run(.install, cancellable: false) {
                try ReportDestinations.remember(root: root, app: app, url: url)
                guard let url else { return }
                let queue = ReportQueue(root: root, url: url, maxEvents: maxEvents)
                self.rememberToken(token, queue: queue, app: app)
                guard let kind else { return }
                var message = report.error?.reason
                if kind == .deferred, let offered = report.offeredVersion {
                    message = "\(offered) waits for an unmetered network"
                }
                // A failure names the version it tried to install (the collector's success
                // rate per version); the active one only when no manifest offered any.
                let version = kind == .failed ? report.offeredVersion ?? report.version : report.version
                let event = ReportEvent(
                    time: clock(), device: try DeviceID.load(root: root), app: app, event: kind,
                    version: version?.description, previousVersion: report.previousVersion?.description,
                    via: kind == .updated ? report.via?.rawValue : nil, bytes: report.bytesDownloaded, fullSize: report.fullSize,
                    durationMs: milliseconds, errorCode: report.error?.cause.rawValue, message: message)
                try queue.append([event])
            }
        } catch {
            logger.notice("\(app): fleet report not queued: \(error)")
        }
    }

    /// Records `token` with `queue`; a failure is one log line, never the token itself.
    private nonisolated func rememberToken(_ token: String?, queue: ReportQueue, app: String) {
        do {
            try queue.remember(token: token)
        } catch {
            logger.warning("\(app): the fleet-report token for \(queue.url.absoluteString) is not recorded: \(error)")
        }
    }

    /// Sends the root's queued reports within `ReportSettings.deadline`; never fails.
    nonisolated func flushReports() async {
        await ReportSender(
            root: store.root, settings: configuration.reporting, network: configuration.network, clock: configuration.clock,
            logger: logger, pool: pool
        ).flush()
    }
}
