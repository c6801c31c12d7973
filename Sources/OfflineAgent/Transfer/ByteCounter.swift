import Foundation

/// Bytes of package files received from the network during one sync, counted as they
/// arrive so a failed sync reports what it cost too (`SyncReport.bytesDownloaded`).
final class ByteCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var total: Int64 = 0

    func add(_ count: Int64) { lock.withLock { total += count } }
    var value: Int64 { lock.withLock { total } }
}
