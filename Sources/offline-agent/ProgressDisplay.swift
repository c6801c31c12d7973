import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Shows sync progress on stderr: a redrawn download bar on a terminal; with `verbose`,
/// one plain line per phase (so cron mail and journald get readable logs). Without
/// `verbose` a sync's only line is its summary.
final class ProgressDisplay: Sendable {
    private let task: Task<Void, Never>

    init(events: AsyncStream<ProgressEvent>, verbose: Bool = false) {
        let terminal = isatty(STDERR_FILENO) == 1
        task = Task {
            // Per app: a batch syncs several apps at once over one event stream.
            var lastPhase: [String: ProgressEvent.Phase] = [:]
            var lastDraw = Date.distantPast
            for await event in events {
                if event.phase == .done { continue }
                if terminal, event.phase == .downloading, event.total > 0 {
                    guard Date().timeIntervalSince(lastDraw) > 0.1 || event.completed == event.total else { continue }
                    lastDraw = Date()
                    let fraction = Double(event.completed) / Double(event.total)
                    let width = 30
                    let filled = Int(fraction * Double(width))
                    let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
                    let line = "\r\(event.app): downloading [\(bar)] \(Int(fraction * 100))% \(event.completed)/\(event.total) bytes"
                    fputs(line, stderr)
                    if event.completed == event.total { fputs("\n", stderr) }
                } else if verbose, event.phase != lastPhase[event.app] {
                    let detail = event.phase == .downloading && event.total > 0 ? " (\(event.total) bytes)" : ""
                    fputs("\(event.app): \(event.phase.rawValue)\(detail)\n", stderr)
                }
                lastPhase[event.app] = event.phase
            }
        }
    }

    /// Waits until the stream has ended and everything is drawn.
    func finish() async {
        await task.value
    }
}
