import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The bytes one app keeps on disk, by area (the sizes of its regular files).
public struct DiskUsage: Sendable, Equatable, Codable {
    /// Extracted versions and their records (`versions/`).
    public var versions: Int64
    /// Kept full packages, the bases of the next patch (`packages/`).
    public var packages: Int64
    /// Downloads in progress or awaiting install (`downloads/`).
    public var downloads: Int64
    /// Everything under the app's directory.
    public var total: Int64
    /// Bytes of the app's version files that no other app links: what removing the app frees
    /// of its versions. Files the object store shares between this app's own versions count once.
    public var alone: Int64
    /// Bytes of the app's version files that another app's versions link too.
    public var shared: Int64
    /// Bytes of the whole object store of the root (`<root>/objects`), all apps together.
    public var store: Int64
    /// Packages kept as whole zips (those with deflated entries, or installed without
    /// hard links) rather than as skeletons over the objects.
    public var packageZips: Int

    /// Creates a usage record; every area defaults to 0 bytes.
    public init(
        versions: Int64 = 0, packages: Int64 = 0, downloads: Int64 = 0, total: Int64 = 0,
        alone: Int64 = 0, shared: Int64 = 0, store: Int64 = 0, packageZips: Int = 0
    ) {
        self.versions = versions
        self.packages = packages
        self.downloads = downloads
        self.total = total
        self.alone = alone
        self.shared = shared
        self.store = store
        self.packageZips = packageZips
    }

    /// A regular file's identity and what it costs.
    struct Inode: Hashable {
        var device: UInt64
        var number: UInt64
    }

    /// Each regular file under `path` once (hard links merged): its size, its link count,
    /// and how many of its links are under `path`.
    static func inodes(under path: String) -> [Inode: (size: Int64, links: Int, seen: Int)] {
        var found: [Inode: (size: Int64, links: Int, seen: Int)] = [:]
        visit(path) { st in
            let key = Inode(device: UInt64(st.st_dev), number: UInt64(st.st_ino))
            found[key, default: (Int64(st.st_size), Int(st.st_nlink), 0)].seen += 1
        }
        return found
    }

    /// Levels measured below a directory: one descriptor each. Extraction never makes
    /// trees deeper than its limit (64); anything below this is not counted.
    static let maxDepth = 256

    /// The bytes of the regular files under `path` (a file counts itself; an inode
    /// linked more than once under `path` counts once), walking by descriptors (no
    /// PATH_MAX limit); 0 when it does not exist.
    static func bytes(under path: String) -> Int64 {
        inodes(under: path).values.reduce(0) { $0 + $1.size }
    }

    /// Calls `body` with the `stat` of every regular file under `path`.
    private static func visit(_ path: String, _ body: (stat) -> Void) {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return }
        visit(fd, depth: 0, body)
    }

    /// Takes ownership of `fd`. Descends with one descriptor per level.
    private static func visit(_ fd: Int32, depth: Int, _ body: (stat) -> Void) {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            close(fd)
            if st.st_mode & S_IFMT == S_IFREG { body(st) }
            return
        }
        guard depth < maxDepth, let stream = fdopendir(fd) else {
            close(fd)
            return
        }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            let child = openat(dirfd(stream), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            if child >= 0 {
                visit(child, depth: depth + 1, body)
            } else {
                var childStat = stat()
                if fstatat(dirfd(stream), name, &childStat, AT_SYMLINK_NOFOLLOW) == 0, childStat.st_mode & S_IFMT == S_IFREG {
                    body(childStat)
                }
            }
        }
    }
}
