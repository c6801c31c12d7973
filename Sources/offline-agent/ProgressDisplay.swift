import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Shows sync progress on stderr.
///
/// - On a terminal (and not `--json`): one self-updating line for the app that last
///   moved: its phase, bytes done of the total, the rate and, for a download that
///   resumed, where it resumed from; cleared when the app ends, so the summary lines
///   that follow stand alone.
/// - Off a terminal with `verbose`: a plain line per phase, and during a download a
///   line every 10 % or 5 seconds, so the journal, a cron log or a CI job sees a long
///   download move.
/// - Otherwise nothing: cron mail and `--json` keep exactly one line per app.
final class ProgressDisplay: Sendable {
    private let task: Task<Void, Never>

    /// Plain progress lines during a download: at least this often, and at every step of `reportFraction`.
    static let reportInterval = 5.0
    static let reportFraction = 0.1

    /// - Parameter record: also given every event (the progress record the D-Bus service reads).
    init(
        events: AsyncStream<ProgressEvent>, verbose: Bool = false, terminal: Bool = isatty(STDERR_FILENO) == 1,
        record: (@Sendable (ProgressEvent) -> Void)? = nil
    ) {
        task = Task {
            var state = ProgressLines(terminal: terminal, verbose: verbose)
            for await event in events {
                record?(event)
                state.show(event, now: ContinuousClock.now)
            }
            state.clear()
        }
    }

    /// Waits until the stream has ended and everything is drawn (and the line cleared).
    func finish() async {
        await task.value
    }
}
