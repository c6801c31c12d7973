import Foundation
import OfflineAgent

/// When `offline-server --auto-halt` halts a staged rollout by itself
/// (docs/PROTOCOL.md, "Automatic halt").
///
/// Written as a comma-separated list, e.g.
/// `failure-rate>5%,rollback-rate>2%,min-devices=20,window=1h`:
///
/// - `failure-rate>P%`: trips when more than P % of the devices that tried the version
///   failed and are not on it;
/// - `rollback-rate>P%`: trips when more than P % of the devices that installed it
///   rolled back from it;
/// - `min-devices=N` (default 20): no rule trips before enough devices in the stage
///   tried the version, so the first two reports cannot halt a rollout: N, or half the
///   devices the stage is expected to hold when that is fewer (`minimum`), so a 5 %
///   canary of 40 devices is judged too;
/// - `window=DURATION` (default `1h`; `s`, `m`, `h`, `d`): only reports received in the
///   last DURATION count (and none received before the stage began).
///
/// At least one rate is required; each key at most once.
public struct AutoHaltRules: Sendable, Equatable, CustomStringConvertible {
    /// Percent (0…100) the failure rate must exceed; nil: no failure rule.
    public var failureRate: Double?
    /// Percent (0…100) the rollback rate must exceed; nil: no rollback rule.
    public var rollbackRate: Double?
    /// Devices in the stage that must have tried the version before any rule trips.
    public var minDevices: Int = 20
    /// How far back reports count, in seconds (by the server's clock on receipt).
    public var windowSeconds: Int64 = 3600

    /// Rules as given; `init(parsing:)` checks them.
    public init(failureRate: Double? = nil, rollbackRate: Double? = nil, minDevices: Int = 20, windowSeconds: Int64 = 3600) {
        self.failureRate = failureRate
        self.rollbackRate = rollbackRate
        self.minDevices = minDevices
        self.windowSeconds = windowSeconds
    }

    /// Reads `failure-rate>5%,rollback-rate>2%,min-devices=20,window=1h`; a `usage`
    /// error names the part it cannot read.
    public init(parsing text: String) throws {
        var seen: Set<String> = []
        for raw in text.split(separator: ",", omittingEmptySubsequences: false) {
            let part = raw.trimmingCharacters(in: .whitespaces)
            let key: String, value: String
            if let range = part.range(of: ">") {
                key = String(part[..<range.lowerBound])
                value = String(part[range.upperBound...])
                guard key == "failure-rate" || key == "rollback-rate" else { throw Self.fail(part, "only failure-rate and rollback-rate take >") }
            } else if let range = part.range(of: "=") {
                key = String(part[..<range.lowerBound])
                value = String(part[range.upperBound...])
                guard key == "min-devices" || key == "window" else { throw Self.fail(part, "only min-devices and window take =") }
            } else {
                throw Self.fail(part, "expected failure-rate>P%, rollback-rate>P%, min-devices=N or window=DURATION")
            }
            guard seen.insert(key).inserted else { throw Self.fail(part, "\(key) is given twice") }
            switch key {
            case "failure-rate": failureRate = try Self.percent(value, part)
            case "rollback-rate": rollbackRate = try Self.percent(value, part)
            case "min-devices":
                guard let n = Int(value), (1...1_000_000).contains(n) else { throw Self.fail(part, "min-devices must be 1 to 1000000") }
                minDevices = n
            default:
                windowSeconds = try Self.duration(value, part)
            }
        }
        guard failureRate != nil || rollbackRate != nil else {
            throw ServerError(.usage, "--auto-halt '\(text)' has no rule: give failure-rate>P% or rollback-rate>P%")
        }
    }

    /// How many devices in the stage must have tried the version before a rule trips:
    /// `max(1, min(N, ⌈D × S / 200⌉))`, half the devices expected in a stage of `S` % of
    /// the `D` devices that have reported about the app, never more than `min-devices`
    /// (N) and never fewer than 1. With the default 20: a 5 % stage of 40 devices needs 1,
    /// of 400 devices 10, of 800 or more 20.
    public func minimum(knownDevices: Int64, stage: Int) -> Int {
        let expected = max(0, knownDevices).multipliedReportingOverflow(by: Int64(max(0, min(stage, 100))))
        let half = expected.overflow ? Int64.max : (expected.partialValue + 199) / 200
        return Int(max(1, min(Int64(minDevices), half)))
    }

    /// The canonical text form, as logged at start.
    public var description: String {
        var parts: [String] = []
        if let failureRate { parts.append("failure-rate>\(Self.format(failureRate))%") }
        if let rollbackRate { parts.append("rollback-rate>\(Self.format(rollbackRate))%") }
        parts.append("min-devices=\(minDevices)")
        parts.append("window=\(windowSeconds)s")
        return parts.joined(separator: ",")
    }

    static func format(_ percent: Double) -> String {
        percent == percent.rounded() ? String(Int(percent)) : String(percent)
    }

    private static func percent(_ value: String, _ part: String) throws -> Double {
        guard value.hasSuffix("%"), let number = Double(value.dropLast()), number.isFinite, (0...100).contains(number),
              !value.dropLast().isEmpty, value.dropLast().allSatisfy({ $0.isNumber || $0 == "." }) else {
            throw fail(part, "a rate is a percentage from 0 to 100 followed by %, like 5%")
        }
        return number
    }

    private static func duration(_ value: String, _ part: String) throws -> Int64 {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        guard let unit = value.last.flatMap({ units[$0] }), let number = Int64(value.dropLast()), number > 0,
              number <= 366 * 86400 / unit else {
            throw fail(part, "window is a whole number of s, m, h or d above 0 and at most a year, like 1h")
        }
        return number * unit
    }

    private static func fail(_ part: String, _ why: String) -> ServerError {
        ServerError(.usage, "--auto-halt: cannot read '\(part)': \(why)")
    }
}
