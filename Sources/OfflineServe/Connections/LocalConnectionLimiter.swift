import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Counts the open connections of one `LocalServer` against its cap.
final class LocalConnectionLimiter: Sendable {
    let limit: Int
    private let open = Mutex(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes a slot for a new connection; false when all `limit` are taken.
    func acquire() -> Bool {
        open.withLock { open in
            guard open < limit else { return false }
            open += 1
            return true
        }
    }

    /// Gives back the slot of a closed connection.
    func release() {
        open.withLock { $0 -= 1 }
    }

    /// Connections open now.
    var count: Int { open.withLock { $0 } }

    /// `requested`, lowered so that every connection can also hold a file open for its
    /// response with descriptors to spare: at most (soft `RLIMIT_NOFILE` − 64) / 2.
    static func effectiveLimit(_ requested: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int.max) else {
            return requested
        }
        let available = Int(clamping: limit.rlim_cur)
        return max(1, min(requested, (available - 64) / 2))
    }
}
