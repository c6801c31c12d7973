import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the installed version of one app or of every app."
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "Only this app.") var app: String?
    @Flag(help: "Print JSON: an object for one app, {\"apps\": [...]} for all.") var json = false
    @Option(help: "The device id for rollout (the root's stable id when absent).") var deviceId: String?

    /// `status --json`'s output: an object for `app`, `{"apps": [...]}` for all when nil
    /// (also the D-Bus `Status()` method's answer).
    static func json(_ agent: Agent, app: String?, deviceID: String?) async throws -> String {
        let statuses = try await agent.status(app: app, deviceID: deviceID)
        var lifecycles: [String: LifecycleStatus] = [:]
        for status in statuses { lifecycles[status.app] = await agent.lifecycle(app: status.app) }
        // The app's fleet-report queue, when its syncs report.
        let root = agent.store.root
        func reports(_ app: String) -> ReportQueueStatus? { ReportQueueStatus(root: root, app: app) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Trusted TUF metadata is kept per repository, not per app: every answer carries all of it.
        let trust = TUFTrustStatus.load(agentRoot: root, now: Date())
        struct All: Encodable {
            var apps: [StatusJSON]
            var trust: [TUFTrustStatus]
        }
        let data: Data
        if app == nil {
            data = try encoder.encode(All(apps: statuses.map { StatusJSON($0, lifecycles[$0.app], report: reports($0.app)) }, trust: trust))
        } else {
            var one = StatusJSON(statuses[0], lifecycles[statuses[0].app], report: reports(statuses[0].app))
            one.trust = trust
            data = try encoder.encode(one)
        }
        return String(decoding: data, as: UTF8.self)
    }

    func run() async throws {
        try await reportingFailures {
            let agent = Agent(root: try ExistingRoot.url(root))
            if json {
                print(try await Self.json(agent, app: app, deviceID: deviceId))
                return
            }
            let statuses = try await agent.status(app: app, deviceID: deviceId)
            var lifecycles: [String: LifecycleStatus] = [:]
            for status in statuses { lifecycles[status.app] = await agent.lifecycle(app: status.app) }
            if statuses.isEmpty { print("no apps in \(root)") }
            for status in statuses {
                let version = status.installed?.version.description ?? "none"
                let usable = status.usable ? "usable offline" : "not usable offline"
                let checked = status.lastCheck.map(RFC3339.string(from:)) ?? "never"
                print("\(status.app) \(version) (\(usable); miniVersion \(status.miniVersion?.description ?? "-"); last check \(checked))")
                if let lifecycle = lifecycles[status.app], let state = lifecycle.state {
                    let launches = state == .trial ? ", \(lifecycle.launches) of \(lifecycle.maxTrialLaunches) launches" : ""
                    print("  state: \(state.rawValue)\(launches)\(lifecycle.held ? ", held" : "")")
                }
                for bad in lifecycles[status.app]?.badVersions ?? [] { print("  bad: \(bad.version) (\(bad.reason))") }
                if let path = status.path { print("  path: \(path)") }
                if let next = status.nextCheck { print("  next check: \(RFC3339.string(from: next)) (\(status.failures) failed checks in a row)") }
                let disk = status.diskUsage
                print("  disk: \(disk.total) bytes (versions \(disk.versions), packages \(disk.packages), downloads \(disk.downloads))")
                print("  files: \(disk.alone) bytes this app's alone, \(disk.shared) shared with other apps; object store \(disk.store) bytes (all apps)")
                if disk.packageZips > 0 { print("  packages: \(disk.packageZips) kept as whole zips (deflated entries)") }
                for entry in status.installed?.whitelist ?? [] { print("  serves: \(entry)") }
            }
            // When trusted metadata expires, with a warning in the last eighth of its life (at most 7 days).
            let now = Date()
            for repository in TUFTrustStatus.load(agentRoot: agent.store.root, now: now) {
                print("trusted metadata \(repository.repository):")
                for role in repository.roles { print("  \(role.describe(now: now))") }
            }
        }
    }
}
