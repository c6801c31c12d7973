import Foundation
/// What `--auto-halt` counts for one staged version: devices in the stage whose
/// reports received in the window name the version (docs/PROTOCOL.md, "Automatic halt").
///
/// Each device counts once, whatever number of events it sent, so one device
/// repeating a failure (or lying about it) weighs one device.
struct RolloutFigures: Sendable, Equatable {
    /// Devices in the stage that sent `updated` or `failed` for the version.
    var tried = 0
    /// Of those, devices with a `failed` and no `updated` for it: not on it now.
    var failed = 0
    /// Devices in the stage that sent `updated` for the version.
    var installed = 0
    /// Of those, devices that rolled back from it: `rolled-back` or `marked-bad` with
    /// `previousVersion` the version.
    var rolledBack = 0

    /// One device's events about the version, from the store.
    struct Device: Sendable {
        var id: String
        var updated: Bool
        var failed: Bool
        var rolledBack: Bool
    }

    /// Adds up `devices`, keeping those `inStage` admits.
    init(_ devices: [Device], inStage: (String) -> Bool) {
        for device in devices where inStage(device.id) {
            if device.updated || device.failed { tried += 1 }
            if device.failed && !device.updated { failed += 1 }
            if device.updated {
                installed += 1
                if device.rolledBack { rolledBack += 1 }
            }
        }
    }

    init() {}

    /// `failed / tried` in percent; nil with nobody tried.
    var failureRate: Double? { tried > 0 ? Double(failed) * 100 / Double(tried) : nil }
    /// `rolledBack / installed` in percent; nil with nobody installed.
    var rollbackRate: Double? { installed > 0 ? Double(rolledBack) * 100 / Double(installed) : nil }

    /// The rule that trips on these figures and why, nil when none does or fewer than
    /// `minimum` devices tried (`AutoHaltRules.minimum(knownDevices:stage:)`).
    func tripped(by rules: AutoHaltRules, minimum: Int) -> String? {
        guard tried >= minimum else { return nil }
        if let limit = rules.failureRate, let rate = failureRate, rate > limit {
            return "failure-rate>\(AutoHaltRules.format(limit))%: \(failed) of \(tried) devices in the stage failed (\(Self.percent(rate)))"
        }
        if let limit = rules.rollbackRate, let rate = rollbackRate, rate > limit {
            return "rollback-rate>\(AutoHaltRules.format(limit))%: \(rolledBack) of \(installed) devices that installed it rolled back (\(Self.percent(rate)))"
        }
        return nil
    }

    private static func percent(_ value: Double) -> String {
        String(format: "%.1f%%", value)
    }
}
