import FoundationEssentials
import OfflineAgent

/// What an app object's properties answer, read from the root (docs/DBUS.md, "App").
struct AppSnapshot: Sendable, Equatable {
    var name: String
    var activeVersion: Version?
    /// `good`, `trial`, `known-bad`; empty when nothing is active.
    var state: String
    var launchesLeft: UInt32
    var held: Bool
    var usable: Bool
    var whitelist: [String]
    /// Microseconds since 1970; 0 before the first check.
    var lastCheck: UInt64
    /// `never`, `ok` or `failed`.
    var lastCheckOutcome: String
    var bytesOnDisk: UInt64
    var badVersions: [BadVersion]
    /// The identity of the app's check record (inode and nanosecond mtime): every check
    /// replaces it, also two in the same second (`lastCheck` has whole seconds).
    var checkStamp = ""
    /// Where each rollback recorded in the history went, by the version left: the
    /// version `RolledBack` names even before `current` is switched to it.
    var rolledBackTo: [String: String] = [:]

    init(_ status: AppStatus, _ lifecycle: LifecycleStatus) {
        name = status.app
        activeVersion = status.installed?.version
        state = lifecycle.state?.rawValue ?? ""
        launchesLeft = lifecycle.state == .trial ? UInt32(clamping: max(0, lifecycle.maxTrialLaunches - lifecycle.launches)) : 0
        held = lifecycle.held
        usable = status.usable
        whitelist = status.installed?.whitelist ?? []
        lastCheck = status.lastCheck.map { UInt64(clamping: Int64(($0.timeIntervalSince1970 * 1_000_000).rounded())) } ?? 0
        lastCheckOutcome = status.lastCheck == nil ? "never" : status.failures > 0 ? "failed" : "ok"
        bytesOnDisk = UInt64(clamping: status.diskUsage.total)
        badVersions = lifecycle.badVersions
        for event in lifecycle.history {
            if let from = event.from { rolledBackTo[from.description] = event.to?.description ?? "" }
        }
    }

    /// The value of property `name`, nil for a name the App interface does not have.
    func property(_ property: String) -> BusValue? {
        switch property {
        case "Name": .string(name)
        case "ActiveVersion": .string(activeVersion?.description ?? "")
        case "State": .string(state)
        case "LaunchesLeft": .uint32(launchesLeft)
        case "Held": .bool(held)
        case "Usable": .bool(usable)
        case "Whitelist": .strings(whitelist)
        case "LastCheck": .uint64(lastCheck)
        case "LastCheckOutcome": .string(lastCheckOutcome)
        case "BytesOnDisk": .uint64(bytesOnDisk)
        default: nil
        }
    }

    /// The properties whose values differ from `old`'s, for PropertiesChanged.
    func changedProperties(from old: AppSnapshot) -> [String] {
        Self.changing.filter { property($0) != old.property($0) }
    }

    static let changing = ["ActiveVersion", "State", "LaunchesLeft", "Held", "Usable", "Whitelist", "LastCheck", "LastCheckOutcome", "BytesOnDisk"]
}
