import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The drawing state of `ProgressDisplay`, per app (a batch syncs several at once).
struct ProgressLines {
    let terminal: Bool
    let verbose: Bool
    private var lastPhase: [String: ProgressEvent.Phase] = [:]
    private var downloadStart: [String: (at: ContinuousClock.Instant, from: Int64)] = [:]
    private var lastReport: [String: (at: ContinuousClock.Instant, fraction: Int)] = [:]
    private var lastDraw: ContinuousClock.Instant?
    private var drawn = false

    init(terminal: Bool, verbose: Bool) {
        self.terminal = terminal
        self.verbose = verbose
    }

    mutating func show(_ event: ProgressEvent, now: ContinuousClock.Instant) {
        let app = event.app
        defer { lastPhase[app] = event.phase }
        if event.phase == .done {
            clear()
            return
        }
        let phaseChanged = lastPhase[app] != event.phase
        if event.phase == .downloading, phaseChanged || downloadStart[app] == nil {
            downloadStart[app] = (now, event.resumedFrom)
        }
        if event.phase == .downloading, event.resumedFrom > 0, downloadStart[app]?.from == 0 {
            downloadStart[app] = (now, event.resumedFrom)
        }
        let text = describe(event, now: now)
        if terminal {
            // Redraw at most 10 times a second, but every phase change and the last byte.
            if !phaseChanged, event.completed != event.total, let lastDraw, now - lastDraw < .milliseconds(100) { return }
            lastDraw = now
            fputs("\r\u{1B}[K\(text)", stderr)
            drawn = true
        } else if verbose {
            if phaseChanged {
                lastReport[app] = (now, 0)
                fputs("\(text)\n", stderr)
            } else if event.phase == .downloading, event.total > 0, let last = lastReport[app] {
                let tenth = Int(Double(event.completed) / Double(event.total) / ProgressDisplay.reportFraction)
                if tenth > last.fraction || now - last.at >= .seconds(ProgressDisplay.reportInterval) {
                    lastReport[app] = (now, max(tenth, last.fraction))
                    fputs("\(text)\n", stderr)
                }
            }
        }
    }

    /// Clears the terminal line, if one is drawn.
    mutating func clear() {
        guard drawn else { return }
        fputs("\r\u{1B}[K", stderr)
        drawn = false
    }

    /// `mall: downloading 12.0 MB of 100.0 MB (12%), 2.0 MB/s, resuming from 10.0 MB`.
    func describe(_ event: ProgressEvent, now: ContinuousClock.Instant) -> String {
        guard event.phase == .downloading, event.total > 0 else { return "\(event.app): \(event.phase.rawValue)" }
        let percent = Int(Double(event.completed) * 100 / Double(event.total))
        var text = "\(event.app): downloading \(Self.bytes(event.completed)) of \(Self.bytes(event.total)) (\(percent)%)"
        if let start = downloadStart[event.app] {
            let elapsed = (now - start.at) / .seconds(1)
            let moved = event.completed - start.from
            if elapsed >= 0.5, moved > 0 { text += ", \(Self.bytes(Int64(Double(moved) / elapsed)))/s" }
        }
        if event.resumedFrom > 0 { text += ", resuming from \(Self.bytes(event.resumedFrom))" }
        return text
    }

    /// Bytes for people: `512 B`, `12.0 KB`, `3.4 MB`, `1.2 GB` (powers of 1000, as download tools show).
    static func bytes(_ count: Int64) -> String {
        let units = ["KB", "MB", "GB", "TB"]
        guard count >= 1000 else { return "\(count) B" }
        var value = Double(count) / 1000
        var unit = 0
        while value >= 1000, unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }
}
