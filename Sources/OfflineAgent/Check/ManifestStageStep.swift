/// One step of a manifest's `stageSchedule` (`docs/PROTOCOL.md`, "Staged rollout"):
/// from `afterSeconds` after the manifest's `publishedAt` on, devices whose bucket is
/// at most `percent` may take the version.
///
/// Steps are measured from the publish time the signed manifest carries, so a
/// static file needs no rewrite for the rollout to widen.
public struct ManifestStageStep: Sendable, Equatable, Codable {
    /// Seconds after `publishedAt` this step begins (0…`maxOffset`).
    public var afterSeconds: Int64
    /// The stage from then on: 0…100.
    public var percent: Int

    /// A step `afterSeconds` after the publish time, at `percent`.
    public init(afterSeconds: Int64, percent: Int) {
        self.afterSeconds = afterSeconds
        self.percent = percent
    }

    /// More steps than this refuse the manifest: a schedule is a handful of steps.
    public static let maxCount = 16
    /// The latest a step may begin: 10 years, far beyond any rollout, and small enough
    /// that adding it to a date never overflows.
    public static let maxOffset: Int64 = 10 * 366 * 86_400

    /// Parses `5@0h,25@24h,100@72h` (units `s`, `m`, `h`, `d`); nil when malformed.
    /// The schedule's rules (order, bounds) are checked by `Manifest.checkFields()`.
    public static func parseSchedule(_ text: String) -> [ManifestStageStep]? {
        var steps: [ManifestStageStep] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, let percent = plainInteger(parts[0]), percent <= 100,
                  let offset = parseDuration(String(parts[1])) else { return nil }
            steps.append(ManifestStageStep(afterSeconds: offset, percent: Int(percent)))
        }
        return steps
    }

    /// Parses `90s`, `30m`, `24h`, `7d` into seconds; nil for anything else or past `maxOffset`.
    public static func parseDuration(_ text: String) -> Int64? {
        guard let unit = text.last, let count = plainInteger(text.dropLast()) else { return nil }
        let scale: Int64 = switch unit {
        case "s": 1
        case "m": 60
        case "h": 3600
        case "d": 86_400
        default: 0
        }
        guard scale > 0, count <= maxOffset / scale else { return nil }
        return count * scale
    }

    /// Digits only (no sign, no spaces), at most 12 of them so nothing overflows.
    private static func plainInteger<S: StringProtocol>(_ text: S) -> Int64? {
        guard !text.isEmpty, text.count <= 12, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Int64(text)
    }

    /// The first rule a schedule breaks, naming the step (`stageSchedule[1]: percent must
    /// not be below the step before`), or nil: each step within bounds, starting strictly
    /// after the one before, never below its percent. One rule for devices
    /// (`Manifest.checkFields()`), publishers and servers.
    public static func problem(in steps: [ManifestStageStep]) -> String? {
        guard (1...maxCount).contains(steps.count) else { return ManifestFields.rule("stageSchedule") }
        var previous: ManifestStageStep?
        for (index, step) in steps.enumerated() {
            let name = "stageSchedule[\(index)]"
            guard (0...maxOffset).contains(step.afterSeconds) else { return "\(name): afterSeconds must be an integer 0…\(maxOffset)" }
            guard (0...100).contains(step.percent) else { return "\(name): percent must be an integer 0…100" }
            if let previous {
                guard step.afterSeconds > previous.afterSeconds else { return "\(name): afterSeconds must be above the step before" }
                guard step.percent >= previous.percent else { return "\(name): percent must not be below the step before" }
            }
            previous = step
        }
        return nil
    }

    /// The text form `parseSchedule` reads, for history and messages.
    public static func describe(_ steps: [ManifestStageStep]) -> String {
        steps.map { step in
            let s = step.afterSeconds
            let offset = s % 86_400 == 0 && s > 0 ? "\(s / 86_400)d" : s % 3600 == 0 ? "\(s / 3600)h" : s % 60 == 0 ? "\(s / 60)m" : "\(s)s"
            return "\(step.percent)@\(offset)"
        }.joined(separator: ",")
    }
}
