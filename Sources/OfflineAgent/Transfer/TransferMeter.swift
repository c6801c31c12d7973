import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

/// Counts transferred bytes and aborts a transfer slower than a minimum speed.
final class TransferMeter: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes: Int64 = 0
    private var done = false

    func add(_ count: Int64) { lock.withLock { bytes += count } }
    func finish() { lock.withLock { done = true } }

    /// Returns when the transfer finishes; throws when fewer than `minimum` bytes/s arrived over `window`.
    func watch(minimum: Int64, window: Duration, url: String) async throws {
        let step = Duration.milliseconds(250)
        var samples: [Int64] = []
        let needed = Int(window / step)
        while true {
            try await Task.sleep(for: step)
            let (count, finished) = lock.withLock { (bytes, done) }
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
