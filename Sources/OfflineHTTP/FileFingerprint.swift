#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// What changes when a file is replaced by rename or rewritten: both servers use it
/// to notice a new `state.json` or version record without reading it.
package struct FileFingerprint: Equatable, Sendable {
    package var device: UInt64
    package var inode: UInt64
    package var size: Int64
    package var modifiedSeconds: Int
    package var modifiedNanoseconds: Int

    package init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        size = Int64(st.st_size)
        modifiedSeconds = st.st_mtim.tv_sec
        modifiedNanoseconds = st.st_mtim.tv_nsec
    }

    /// The fingerprint of a regular file, or nil when `path` is not one.
    package init?(path: String) {
        self.init(path: path, kind: S_IFREG)
    }

    /// The fingerprint of a directory, or nil when `path` is not one: its modification
    /// time moves when an entry is added, removed or renamed.
    package init?(directory path: String) {
        self.init(path: path, kind: S_IFDIR)
    }

    private init?(path: String, kind: mode_t) {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == kind else { return nil }
        self.init(st)
    }
}
