import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A shared `flock` on a version's record held while a reader uses that version;
/// garbage collection takes it exclusively, so it never deletes a version in use.
public final class ReaderLock: @unchecked Sendable {
    private let fd: Int32

    private init(fd: Int32) { self.fd = fd }

    /// Takes a shared lock on `path`, or nil when it does not exist.
    public static func shared(_ path: String) -> ReaderLock? {
        lock(path, LOCK_SH)
    }

    static func tryExclusive(_ path: String) -> ReaderLock? {
        guard FileSystem.exists(path) else { return ReaderLock(fd: -1) }
        return lock(path, LOCK_EX | LOCK_NB)
    }

    private static func lock(_ path: String, _ operation: Int32) -> ReaderLock? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        guard flock(fd, operation) == 0 else {
            close(fd)
            return nil
        }
        return ReaderLock(fd: fd)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }
}
