import Foundation
import Logging
import OfflineAgent
import OfflinePublish

/// `offline-server --auto-halt`: after each stored batch, re-reads the figures of the
/// version each touched app is staging and, when a rule trips, halts that stage through
/// `ReleaseEditor.halt` — the publisher's own checks, re-signing with the server's key
/// and atomic write into the publish directory, so a CDN synced from it halts too
/// (docs/PROTOCOL.md, "Automatic halt").
///
/// One evaluation per app at a time: a batch that arrives while its app is being
/// evaluated marks it, and the running evaluation reads the figures once more, so no
/// stored report is left unread and two halts of one version never race in this process
/// (another instance's halt is refused by `ReleaseEditor.halt` once this one wrote).
actor AutoHalter {
    let rules: AutoHaltRules
    let store: any ReportStorage
    let catalog: ReferenceServerCatalog
    let logger: Logger
    /// Count only events a device's own credential sent (enrolment required): made-up
    /// device ids, and reports sent with the fleet's shared token, weigh nothing.
    let authenticatedOnly: Bool
    private var running: Set<String> = []
    private var pending: Set<String> = []
    /// When a halt of (app, version) last failed for a reason other than a refusal: it is
    /// tried again at most once a minute, so a server without the right key does not
    /// re-sign in vain (and log) on every report.
    private var failedAt: [String: ContinuousClock.Instant] = [:]

    /// Most evaluations one `check` runs for an app before leaving the rest to the next batch.
    static let maxRounds = 64

    init(rules: AutoHaltRules, store: any ReportStorage, catalog: ReferenceServerCatalog, authenticatedOnly: Bool = false, logger: Logger) {
        self.rules = rules
        self.authenticatedOnly = authenticatedOnly
        self.store = store
        self.catalog = catalog
        self.logger = logger
    }

    /// Evaluates the rules for `apps` (those a stored batch named); returns once each was
    /// evaluated, or handed to an evaluation already running.
    func check(apps: Set<String>) async {
        for app in apps.sorted() {
            guard !running.contains(app) else {
                pending.insert(app)
                continue
            }
            running.insert(app)
            var rounds = 0
            repeat {
                pending.remove(app)
                rounds += 1
                await evaluate(app)
            } while pending.contains(app) && rounds < Self.maxRounds
            running.remove(app)
        }
    }

    /// Reads the figures of `app`'s staged version and halts it when a rule trips.
    func evaluate(_ app: String, now: Date = Date()) async {
        guard AppName.isValid(app), let entry = try? catalog.entry(app: app) else { return }
        let state = entry.state
        guard state.isStaging(at: now) else { return }
        // With a halt key, a halt is the rollout file: already there, nothing to do.
        if catalog.haltKey != nil, TUFRepository.rolloutStage(app: app, publishDirectory: catalog.directory) == 0 { return }
        let version = state.latest
        let stage = state.stageInForce(at: now)
        let since = Self.windowStart(state: state, rules: rules, now: now)
        let devices: [RolloutFigures.Device], known: Int64
        do {
            devices = try await store.rolloutDevices(
                app: app, version: version.description, sinceMillis: since, authenticatedOnly: authenticatedOnly)
            known = try await store.knownDevices(app: app)
        } catch {
            logger.error("auto-halt: cannot read the figures of \(app) \(version): \(error)")
            return
        }
        // Only devices in the stage count: a device outside it never took the version, so
        // its report about it is a mistake or a lie (the bucket is the agent's own).
        let figures = RolloutFigures(devices) { Resolver.rolloutBucket(deviceID: $0, app: app) <= stage }
        guard let tripped = figures.tripped(by: rules, minimum: rules.minimum(knownDevices: known, stage: stage)) else { return }
        let key = "\(app) \(version)"
        if let last = failedAt[key], ContinuousClock.now - last < .seconds(60) { return }
        let windowText = "reports received since \(RFC3339.string(from: Date(timeIntervalSince1970: Double(since) / 1000)))"
        let reason = "\(tripped), \(windowText), stage \(stage)%"
        let directory = catalog.directory, signingKey = catalog.signingKey, haltKey = catalog.haltKey
        do {
            _ = try await OwnThread.run {
                if let haltKey {
                    // The manifest stays as signed; devices on a trusted root apply the halt.
                    try TUFRepository.halt(app: app, publishDirectory: directory, key: haltKey, stage: 0, reason: reason, now: now)
                } else {
                    try ReleaseEditor.halt(
                        app: app, version: version, publishDirectory: directory, key: signingKey, reason: reason, now: now)
                }
            }
            logger.warning("auto-halt: halted \(app) \(version) at stage \(stage)%: \(reason)")
        } catch let error as PublishError where error.code == .usage && Self.changedSince(app, version, catalog, now) {
            // Refused because another instance or an operator changed the release since the
            // figures were read: nothing left to do.
            logger.info("auto-halt: \(app) \(version) not halted: \(error.reason)")
        } catch {
            failedAt[key] = ContinuousClock.now
            logger.error("auto-halt: cannot halt \(app) \(version) (\(reason)): \(error)")
        }
    }

    /// Whether `version` of `app` is no longer the latest or no longer being staged: a
    /// refused halt is then someone else's halt or change, not a fault of this server's.
    private static func changedSince(_ app: String, _ version: Version, _ catalog: ReferenceServerCatalog, _ now: Date) -> Bool {
        guard let state = (try? catalog.entry(app: app))?.state else { return true }
        return state.latest != version || !state.isStaging(at: now)
    }

    /// Milliseconds since 1970 from which received reports count: the window, but never
    /// before the stage now in force began (a resume starts the count afresh).
    static func windowStart(state: PublishState, rules: AutoHaltRules, now: Date) -> Int64 {
        var start = now.addingTimeInterval(-Double(rules.windowSeconds))
        if let began = (state.lastStageRevision?.time ?? state.publishedAt).flatMap(RFC3339.date(from:)), began > start {
            start = began
        }
        return Int64((start.timeIntervalSince1970 * 1000).rounded(.down))
    }
}
