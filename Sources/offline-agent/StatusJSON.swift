import ArgumentParser
import FoundationEssentials
import OfflineAgent

/// `status --json` for one app: app, version, miniVersion, usable, path, lastCheck, whitelist,
/// rollout, previousVersion, diskBytes (`{"versions", "packages", "downloads", "total"}`),
/// nextCheck and failures (throttle, `Retry-After`, backoff),
/// and the lifecycle: state, launches, maxTrialLaunches, held, badVersions, history;
/// report: the app's fleet-report queue (`{"url", "pending", "dropped", "rejected",
/// "failures"}`), null when its syncs do not report; trust (one app's object only): the
/// trusted TUF metadata of every repository (`[{"repository", "roles": [{"role",
/// "version", "expires", "soon", "expired"}]}]`), as `{"apps", "trust"}` has it for all.
struct StatusJSON: Encodable {
    var status: AppStatus
    var lifecycle: LifecycleStatus?
    var report: ReportQueueStatus?
    var trust: [TUFTrustStatus]?

    init(_ status: AppStatus, _ lifecycle: LifecycleStatus?, report: ReportQueueStatus? = nil) {
        self.status = status
        self.lifecycle = lifecycle
        self.report = report
    }

    private enum CodingKeys: String, CodingKey {
        case app, version, miniVersion, usable, path, lastCheck, whitelist, rollout, previousVersion, diskBytes
        case nextCheck, failures
        case state, launches, maxTrialLaunches, held, badVersions, history
        case report, trust
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(status.app, forKey: .app)
        try c.encode(status.installed?.version.description, forKey: .version)
        try c.encode(status.miniVersion?.description, forKey: .miniVersion)
        try c.encode(status.usable, forKey: .usable)
        try c.encode(status.path, forKey: .path)
        try c.encode(status.lastCheck.map(RFC3339.string(from:)), forKey: .lastCheck)
        try c.encode(status.installed?.whitelist ?? [], forKey: .whitelist)
        try c.encode(status.installed?.rollout, forKey: .rollout)
        try c.encode(status.installed?.previousVersion?.description, forKey: .previousVersion)
        try c.encode(lifecycle?.state?.rawValue, forKey: .state)
        try c.encode(lifecycle?.launches ?? 0, forKey: .launches)
        try c.encode(lifecycle?.maxTrialLaunches ?? 0, forKey: .maxTrialLaunches)
        try c.encode(lifecycle?.held ?? false, forKey: .held)
        try c.encode(lifecycle?.badVersions.map(\.version.description) ?? [], forKey: .badVersions)
        try c.encode(lifecycle?.history.map(LifecycleEventJSON.init) ?? [], forKey: .history)
        try c.encode(status.diskUsage, forKey: .diskBytes)
        try c.encode(status.nextCheck.map(RFC3339.string(from:)), forKey: .nextCheck)
        try c.encode(status.failures, forKey: .failures)
        try c.encode(report, forKey: .report)
        try c.encodeIfPresent(trust, forKey: .trust)
    }
}
