import FoundationEssentials
import OfflineAgent
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Leaves a sync's progress where the D-Bus service sees it (`ProgressRecord`), for a
/// sync that runs in a process of its own (`offline-agent sync`, the timer's).
///
/// Fed the sync's progress events. It writes nothing until a sync really starts (a
/// throttled no-op has only its `done`, and leaves the root untouched), then at most one
/// record per app every `interval` while a phase repeats (a download reports every chunk),
/// always the first event of a phase and a download's last; at `done` it removes the
/// record it wrote, so a sync leaves nothing behind. Each write is a small file renamed
/// over the last (no fsync: a record is worth nothing after a crash, and the next sync's
/// clean-up removes it); a write that fails is skipped, never the sync's failure.
public final class ProgressRecordWriter: Sendable {
    private let root: String
    private let interval: Duration
    private let last = Mutex<[String: (phase: ProgressEvent.Phase, at: ContinuousClock.Instant)]>([:])

    /// At most one record per app per `interval` while its phase stays the same.
    public static let defaultInterval: Duration = .milliseconds(100)

    /// A writer for the apps of `root`.
    public init(root: String, interval: Duration = defaultInterval) {
        self.root = root
        self.interval = interval
    }

    /// Takes one event of a sync; writes its record when it is due.
    public func note(_ event: ProgressEvent) {
        guard AppName.isValid(event.app) else { return }
        let now = ContinuousClock.now
        let due = last.withLock { last -> Bool in
            let previous = last[event.app]
            if event.phase == .done {
                // Nothing written: a throttled no-op, which writes nothing.
                guard previous != nil else { return false }
                last[event.app] = nil
                return true
            }
            if let previous, previous.phase == event.phase, now - previous.at < interval,
               event.completed < event.total || event.total == 0 { return false }
            last[event.app] = (event.phase, now)
            return true
        }
        guard due else { return }
        if event.phase == .done {
            unlink(ProgressRecord.path(root: root, app: event.app))
            return
        }
        let completed = event.total > 0 ? min(event.completed, event.total) : 0
        write(ProgressRecord(phase: event.phase, bytes: completed, total: max(0, event.total)), app: event.app)
    }

    private func write(_ record: ProgressRecord, app: String) {
        let directory = "\(root)/apps/\(app)"
        let temporary = "\(directory)/\(ProgressRecord.temporaryName)"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o640)
        guard fd >= 0 else { return }
        let bytes = record.encoded
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count, rename(temporary, "\(directory)/\(ProgressRecord.fileName)") == 0 else {
            unlink(temporary)
            return
        }
    }
}
