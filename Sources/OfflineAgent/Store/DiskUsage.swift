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

    /// Creates a usage record; every area defaults to 0 bytes.
    public init(versions: Int64 = 0, packages: Int64 = 0, downloads: Int64 = 0, total: Int64 = 0) {
        self.versions = versions
        self.packages = packages
        self.downloads = downloads
        self.total = total
    }

    /// Levels measured below a directory: one descriptor each. Extraction never makes
    /// trees deeper than its limit (64); anything below this is not counted.
    static let maxDepth = 256

    /// The bytes of the regular files under `path` (a file counts itself), walking by
    /// descriptors (no PATH_MAX limit); 0 when it does not exist.
    static func bytes(under path: String) -> Int64 {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return 0 }
        return bytes(of: fd, depth: 0)
    }

    /// Takes ownership of `fd`. Descends with one descriptor per level.
    private static func bytes(of fd: Int32, depth: Int) -> Int64 {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return 0
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            close(fd)
            return st.st_mode & S_IFMT == S_IFREG ? Int64(st.st_size) : 0
        }
        guard depth < maxDepth, let stream = fdopendir(fd) else {
            close(fd)
            return 0
        }
        defer { closedir(stream) }
        var total: Int64 = 0
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            let child = openat(dirfd(stream), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            if child >= 0 {
                total += bytes(of: child, depth: depth + 1)
            } else {
                var childStat = stat()
                if fstatat(dirfd(stream), name, &childStat, AT_SYMLINK_NOFOLLOW) == 0, childStat.st_mode & S_IFMT == S_IFREG {
                    total += Int64(childStat.st_size)
                }
            }
        }
        return total
    }
}
