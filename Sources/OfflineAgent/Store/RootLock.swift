import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The exclusive `flock` on `<root>/.lock` held for a whole sync or rollback.
///
/// `flock` rather than `fcntl` locks: closing any descriptor of the file would drop
/// an `fcntl` lock, and `flock` also excludes a second holder inside one process.
final class RootLock: Sendable {
    private let fd: Int32

    /// Takes the lock without waiting; throws `.busy` when another run holds it.
    init(root: String) throws {
        let path = "\(root)/.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            throw OfflineAgentError(.install, "cannot open lock file", path: path, underlying: POSIXFailure("open"))
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let failure = POSIXFailure("flock")
            close(fd)
            if failure.errno == EWOULDBLOCK {
                throw OfflineAgentError(.busy, "another sync holds the lock", path: path)
            }
            throw OfflineAgentError(.install, "cannot lock", path: path, underlying: failure)
        }
        self.fd = fd
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
