import ArgumentParser
import FoundationEssentials
import Logging
import OfflineAgent

/// The `sync --json` object: app, result, version, previousVersion, via, bytesDownloaded, error.
struct SyncJSON: Encodable {
    var app: String
    var result: String
    var version: String?
    var previousVersion: String?
    var via: String?
    var bytesDownloaded: Int64
    var error: String?
    /// The stable cause code (`OfflineAgentError.Cause`).
    var errorCode: String?
    /// The phase that failed (`OfflineAgentError.Code`).
    var phase: String?
    /// For `not-in-stage`: the offered version, the stage in force and this device's bucket.
    var offeredVersion: String?
    var stage: Int?
    var bucket: Int?

    init(_ report: SyncReport) {
        app = report.app
        result = report.result.rawValue
        version = report.version?.description
        previousVersion = report.previousVersion?.description
        via = report.via?.rawValue
        bytesDownloaded = report.bytesDownloaded
        error = report.error?.description
        errorCode = report.error?.cause.rawValue
        phase = report.error?.code.rawValue
        if let stage = report.stage {
            offeredVersion = report.offeredVersion?.description
            self.stage = stage.percent
            bucket = stage.bucket
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(app, forKey: .app)
        try c.encode(result, forKey: .result)
        // null rather than absent, so consumers can rely on the keys.
        try c.encode(version, forKey: .version)
        try c.encode(previousVersion, forKey: .previousVersion)
        try c.encode(via, forKey: .via)
        try c.encode(bytesDownloaded, forKey: .bytesDownloaded)
        try c.encodeIfPresent(error, forKey: .error)
        try c.encodeIfPresent(errorCode, forKey: .errorCode)
        try c.encodeIfPresent(phase, forKey: .phase)
        try c.encodeIfPresent(offeredVersion, forKey: .offeredVersion)
        try c.encodeIfPresent(stage, forKey: .stage)
        try c.encodeIfPresent(bucket, forKey: .bucket)
    }

    private enum CodingKeys: String, CodingKey {
        case app, result, version, previousVersion, via, bytesDownloaded, error, errorCode, phase
        case offeredVersion, stage, bucket
    }

    func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    /// The line of an app whose sync a signal stopped: what stays, and that it resumes.
    static func interruptedLine(_ report: SyncReport, keptBytes: Int64) -> String {
        let active = report.version.map { "\($0) stays active" } ?? "nothing is installed yet"
        let offered = report.offeredVersion.map { " of \($0)" } ?? ""
        let kept = keptBytes > 0
            ? "\(keptBytes) bytes of the download\(offered) kept; the next sync resumes from there"
            : "nothing downloaded to keep; the next sync starts again"
        return "\(report.app): interrupted: \(kept) (not counted as a check); \(active)"
    }

    /// The one line of a sync. `activeIsBad`: the version left active is itself marked
    /// bad (a rollback found nothing to go back to), so it is not said to stay in use.
    static func line(_ report: SyncReport, activeIsBad: Bool = false) -> String {
        let version = report.version?.description ?? "none"
        switch report.result {
        case .updated:
            let fallback = report.patchFallbackReason.map { " (patch unusable: \($0))" } ?? ""
            return "\(report.app): updated \(report.previousVersion?.description ?? "none") -> \(version) via \(report.via?.rawValue ?? "?"), \(report.bytesDownloaded) bytes downloaded\(fallback)"
        case .upToDate: return "\(report.app): up-to-date at \(version)"
        case .throttled:
            let why = report.throttleReason.map { " (\($0))" } ?? ""
            return "\(report.app): throttled\(why), next check \(report.nextCheck.map(RFC3339.string(from:)) ?? "later"); --force checks now"
        case .deferred: return "\(report.app): deferred until an unmetered network"
        case .held: return "\(report.app): held at \(version); nothing downloaded (offline-agent unhold)"
        case .knownBad:
            // The same words as `status`: a bad version is "marked bad", and not used offline.
            let offered = report.offeredVersion?.description ?? "the offered version"
            let active = activeIsBad
                ? "\(version) is marked bad too: nothing of \(report.app) is used offline"
                : "\(version) stays active"
            return "\(report.app): \(offered) is marked bad here and not installed; \(active) (offline-agent forget-bad --app \(report.app) clears the marks)"
        case .notInStage:
            let offered = report.offeredVersion?.description ?? "the offered version"
            let stage = report.stage.map { " (stage \($0.percent)%, this device's bucket \($0.bucket))" } ?? ""
            let kept = report.version == nil ? "nothing installed" : "\(version) stays active"
            return "\(report.app): \(offered) is not rolled out to this device yet\(stage); \(kept)"
        case .failed:
            // Busy is not a fault: another run is doing the work.
            if report.error?.code == .busy { return "\(report.app): busy, another sync holds the root's lock; \(version) stays active" }
            let next = report.nextCheck.map { "; next check after \(RFC3339.string(from: $0))" } ?? ""
            return "\(report.app): failed: \(report.error?.description ?? "unknown error"); \(version) stays active\(next)"
        }
    }
}
