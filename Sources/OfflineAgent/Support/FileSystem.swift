import COfflineShims
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Small POSIX helpers for crash-safe file handling: the steps of the install
/// recipe (temp → fsync → rename → fsync parent) in one place.
package enum FileSystem {
    /// Creates a fresh directory `<parent>/<prefix>XXXXXX` (mode 0700) and returns its path.
    package static func makeTemporaryDirectory(in parent: String, prefix: String) throws -> String {
        var template = Array("\(parent)/\(prefix)XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else {
            throw POSIXFailure("mkdtemp \(parent)/\(prefix)")
        }
        return string(from: template)
    }

    /// Creates a fresh file `<parent>/<prefix>XXXXXX` and returns its descriptor and path.
    package static func makeTemporaryFile(in parent: String, prefix: String) throws -> (fd: Int32, path: String) {
        var template = Array("\(parent)/\(prefix)XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { cshims_mkstemp_cloexec($0.baseAddress!) }
        guard fd >= 0 else { throw POSIXFailure("mkstemp \(parent)/\(prefix)") }
        return (fd, string(from: template))
    }

    private static func string(from template: [CChar]) -> String {
        String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Removes a file or a directory tree; missing paths are fine. Errors are ignored:
    /// callers that must know the tree is gone use `removeTree`.
    package static func remove(_ path: String) {
        try? removeTree(path)
    }

    /// Removes a file or a directory tree of any depth; a missing path is fine.
    ///
    /// Works through directory descriptors (`openat`/`unlinkat`/`fdopendir`), never by
    /// path strings, so a tree deeper than PATH_MAX goes too, and holds at most two
    /// descriptors whatever the depth: it descends into one directory at a time and
    /// climbs back through `..`, checking that `..` is the directory it came from
    /// (device and inode), so a concurrent rename cannot turn it loose elsewhere.
    /// - Throws: `POSIXFailure` when something could not be removed; the rest of the
    ///   tree may then remain, but never anything outside it.
    package static func removeTree(_ path: String) throws {
        let parentFD = open(parent(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else {
            if errno == ENOENT { return }
            throw POSIXFailure("open \(parent(of: path))")
        }
        defer { close(parentFD) }
        try removeTree(in: parentFD, name: name(of: path))
    }

    /// Removes the entry `name` of the directory `parentFD` and, for a directory, everything in it.
    package static func removeTree(in parentFD: Int32, name: String) throws {
        var st = stat()
        guard fstatat(parentFD, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return }
            throw POSIXFailure("stat \(name)")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            guard unlinkat(parentFD, name, 0) == 0 || errno == ENOENT else { throw POSIXFailure("unlink \(name)") }
            return
        }
        // The path from `name` down to the directory being emptied: names and identities.
        var names: [String] = []
        var identities: [(dev: UInt, ino: UInt)] = []
        var current = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard current >= 0 else { throw POSIXFailure("open \(name)") }
        unseal(current, mode: st.st_mode)
        names.append(name)
        identities.append((UInt(st.st_dev), UInt(st.st_ino)))
        while true {
            // Empty `current`: unlink files, stop at the first subdirectory and go down into it.
            guard let stream = fdopendir(current) else {
                let failure = POSIXFailure("opendir \(name)")
                close(current)
                throw failure
            }
            var child: String?
            var failure: POSIXFailure?
            while let entry = readdir(stream) {
                let entryName = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if entryName == "." || entryName == ".." { continue }
                if entry.pointee.d_type == UInt8(DT_DIR) {
                    child = entryName
                    break
                }
                if unlinkat(current, entryName, 0) == 0 || errno == ENOENT { continue }
                if errno == EISDIR {  // d_type was unknown (DT_UNKNOWN on some file systems)
                    child = entryName
                    break
                }
                failure = POSIXFailure("unlink \(entryName)")
                break
            }
            if let failure {
                closedir(stream)
                throw failure
            }
            if let child {
                let next = openat(current, child, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                var childStat = stat()
                guard next >= 0, fstat(next, &childStat) == 0 else {
                    let failure = POSIXFailure("open \(child)")
                    if next >= 0 { close(next) }
                    closedir(stream)
                    throw failure
                }
                closedir(stream)
                unseal(next, mode: childStat.st_mode)
                names.append(child)
                identities.append((UInt(childStat.st_dev), UInt(childStat.st_ino)))
                current = next
                continue
            }
            // `current` is empty: climb to its parent and remove it.
            let emptied = names.removeLast()
            identities.removeLast()
            if names.isEmpty {
                closedir(stream)
                guard unlinkat(parentFD, emptied, AT_REMOVEDIR) == 0 || errno == ENOENT else {
                    throw POSIXFailure("rmdir \(emptied)")
                }
                return
            }
            let up = openat(current, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            closedir(stream)
            var upStat = stat()
            guard up >= 0, fstat(up, &upStat) == 0,
                  UInt(upStat.st_dev) == identities.last!.dev, UInt(upStat.st_ino) == identities.last!.ino else {
                let failure = POSIXFailure("climb from \(emptied)", errno: up >= 0 ? ESTALE : errno)
                if up >= 0 { close(up) }
                throw failure
            }
            guard unlinkat(up, emptied, AT_REMOVEDIR) == 0 || errno == ENOENT else {
                let failure = POSIXFailure("rmdir \(emptied)")
                close(up)
                throw failure
            }
            current = up
        }
    }

    /// Gives the owner write and search rights on a directory about to be emptied: an
    /// installed version's directories are 0555, and a caller without CAP_DAC_OVERRIDE
    /// could not unlink what they hold. A failure here surfaces as the unlink's.
    private static func unseal(_ fd: Int32, mode: mode_t) {
        if mode & 0o300 != 0o300 { _ = fchmod(fd, (mode & 0o7777) | 0o700) }
    }

    /// fsyncs a file or directory by path.
    package static func sync(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(path)") }
    }

    /// Flushes the whole filesystem holding `path`: one call instead of an fsync per extracted file.
    package static func syncFilesystem(containing path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        guard cshims_syncfs(fd) == 0 else { throw POSIXFailure("syncfs \(path)") }
    }

    /// Renames atomically and makes the rename durable by syncing the destination's directory.
    package static func renameDurably(_ from: String, to: String) throws {
        try renameAtomically(from, to: to, durable: true)
    }

    /// Renames atomically; `durable` syncs the destination's directory too (false: a later
    /// `syncFilesystem` of the caller's makes the rename durable).
    package static func renameAtomically(_ from: String, to: String, durable: Bool) throws {
        guard rename(from, to) == 0 else { throw POSIXFailure("rename \(from) -> \(to)") }
        if durable { try sync(parent(of: to)) }
    }

    /// Writes `data` to `path` atomically: temp file, fsync, rename, fsync of the directory.
    ///
    /// - Parameter durable: false leaves out both fsyncs, for a file that a `syncFilesystem`
    ///   of the caller's flushes before anything relies on it (an install's files before
    ///   its swap): the rename stays atomic against a killed process, and a power cut before
    ///   that flush may leave the old file, the new one or an empty one.
    package static func writeAtomically(_ data: Data, to path: String, mode: mode_t = 0o644, durable: Bool = true) throws {
        let dir = parent(of: path)
        let (fd, temp) = try makeTemporaryFile(in: dir, prefix: ".\(name(of: path)).tmp-")
        var closed = false
        do {
            do { try FileDescriptor.writeAll(fd, data) } catch { throw POSIXFailure("write \(temp)", errno: error.errno) }
            guard fchmod(fd, mode) == 0 else { throw POSIXFailure("chmod \(temp)") }
            guard !durable || fsync(fd) == 0 else { throw POSIXFailure("fsync \(temp)") }
            close(fd)
            closed = true
            try renameAtomically(temp, to: path, durable: durable)
        } catch {
            if !closed { close(fd) }
            unlink(temp)
            throw error
        }
    }

    package static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    package static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    package static func fileSize(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// A kernel-generated file's text (`/proc/locks`), read until its end: such files
    /// report size 0, and a reader that trusts the size (or reads one page) sees a
    /// prefix of them once they outgrow a page. Nil when it cannot be opened or read;
    /// at most `limit` bytes.
    package static func readKernelFile(_ path: String, limit: Int = 16 << 20) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while bytes.count < limit {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { break }
            bytes += chunk[..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Bytes available to an unprivileged writer on the filesystem holding `path`.
    package static func availableBytes(at path: String) -> Int64? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }

    /// The directory part of `path` ("." for a bare name, "/" for the root), trailing
    /// slashes ignored, as `NSString.deletingLastPathComponent` (not in FoundationEssentials).
    package static func parent(of path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        var head = trimmed[..<slash]
        while head.hasSuffix("/") { head = head.dropLast() }
        return head.isEmpty ? "/" : String(head)
    }

    /// The last component of `path`, trailing slashes ignored, as `NSString.lastPathComponent`.
    package static func name(of path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard trimmed != "/", let slash = trimmed.lastIndex(of: "/") else { return String(trimmed) }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    private static func withoutTrailingSlashes(_ path: String) -> Substring {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        return trimmed
    }

    /// An absolute, standardized form of a user-given path.
    package static func absolute(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.path
    }
}
