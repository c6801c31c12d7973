import Dispatch
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// SIGINT and SIGTERM during `sync`: instead of dying mid-download with nothing said,
/// the sync is cancelled (the partial download stays for the next run to resume, the
/// installed version is untouched, and no check is counted), each app prints its line,
/// and the process exits 128 + the signal (130, 143) as shells expect.
final class SyncInterruption: Sendable {
    private let received = Mutex<Int32>(0)
    private let cancel = Mutex<(@Sendable () -> Void)?>(nil)
    /// Kept so the sources live as long as the command; set up in `init` and never
    /// touched again (DispatchSource is thread-safe, only not marked Sendable).
    nonisolated(unsafe) private let sources: [any DispatchSourceSignal]

    /// Takes over SIGINT and SIGTERM until `stop()`.
    init() {
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            // The default action would end the process before the source sees the signal.
            _ = Glibc.signal(number, SIG_IGN)
            sources.append(DispatchSource.makeSignalSource(signal: number, queue: .global()))
        }
        self.sources = sources
        for (source, number) in zip(sources, [SIGINT, SIGTERM]) {
            source.setEventHandler { [self] in
                let first = received.withLock { value in
                    defer { if value == 0 { value = number } }
                    return value == 0
                }
                if first { cancel.withLock { $0 }?() }
            }
            source.resume()
        }
    }

    /// What a signal cancels: the running batch (a signal already received cancels it at once).
    func watch(_ body: @escaping @Sendable () -> Void) {
        cancel.withLock { $0 = body }
        if caught != 0 { body() }
    }

    /// The signal received, 0 when none.
    var caught: Int32 { received.withLock { $0 } }

    /// The exit status for the signal received: 128 + its number.
    var exitStatus: Int32 { 128 + caught }
}
