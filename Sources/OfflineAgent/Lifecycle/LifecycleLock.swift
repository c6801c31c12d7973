import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The exclusive `flock` on `<root>/apps/<app>/lifecycle.lock`, held only while the
/// lifecycle record is read, changed and written (milliseconds).
///
/// Separate from the `RootLock`, which a sync holds for minutes: a page confirming,
/// or a launch being counted, during a sync must not fail. Lock order: the root's
/// lock (never waited for) before this one (waited for, at most `timeout`).
final class LifecycleLock {
    private let fd: Int32

    init(path: String, timeout: Duration = .seconds(5)) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            throw OfflineAgentError(.install, "cannot open lock file", cause: .io, path: path, underlying: POSIXFailure("open"))
        }
        let deadline = ContinuousClock.now + timeout
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let failure = POSIXFailure("flock")
            guard failure.errno == EWOULDBLOCK || failure.errno == EINTR else {
                close(fd)
                throw OfflineAgentError(.install, "cannot lock", cause: .io, path: path, underlying: failure)
            }
            guard ContinuousClock.now < deadline else {
                close(fd)
                throw OfflineAgentError(.busy, "the app's lifecycle record stays locked", cause: .busy, path: path)
            }
            usleep(2_000)
        }
        self.fd = fd
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
