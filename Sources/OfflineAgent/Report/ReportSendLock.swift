import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `<queue>/send.lock`, taken without waiting: one sender per queue at a time (a sync
/// and `serve` may flush together); the other leaves the queue to it.
package final class ReportSendLock: Sendable {
    private let fd: Int32

    /// Nil when another sender holds it (or it cannot be opened).
    package init?(directory: String) {
        let fd = open("\(directory)/send.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { return nil }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
