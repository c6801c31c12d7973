import Synchronization

/// Bytes of package files received from the network during one sync, counted as they
/// arrive so a failed sync reports what it cost too (`SyncReport.bytesDownloaded`).
final class ByteCounter: Sendable {
    private let total = Mutex<Int64>(0)

    func add(_ count: Int64) { total.withLock { $0 += count } }
    var value: Int64 { total.withLock { $0 } }
}
