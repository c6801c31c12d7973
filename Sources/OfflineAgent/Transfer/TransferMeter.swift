import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Counts transferred bytes and aborts a transfer slower than a minimum speed.
final class TransferMeter: Sendable {
    private let state = Mutex<(bytes: Int64, done: Bool)>((0, false))

    func add(_ count: Int64) { state.withLock { $0.bytes += count } }
    func finish() { state.withLock { $0.done = true } }

    /// Returns when the transfer finishes; throws when fewer than `minimum` bytes/s arrived over `window`.
    func watch(minimum: Int64, window: Duration, url: String) async throws {
        let step = Duration.milliseconds(250)
        var samples: [Int64] = []
        let needed = Int(window / step)
        while true {
            try await Task.sleep(for: step)
            let (count, finished) = state.withLock { ($0.bytes, $0.done) }
            if finished { return }
            samples.append(count)
            if samples.count > needed {
                samples.removeFirst(samples.count - needed - 1)
                let seconds = Double(window.components.seconds) + Double(window.components.attoseconds) / 1e18
                if Double(count - samples[0]) < Double(minimum) * seconds {
                    throw OfflineAgentError(.download, "transfer slower than \(minimum) bytes/s over \(window)", cause: .timeout, path: url)
                }
            }
        }
    }
}
