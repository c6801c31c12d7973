import CShims
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Small POSIX helpers for crash-safe file handling: the steps of the install
/// recipe (temp → fsync → rename → fsync parent) in one place.
enum FileSystem {
    /// Creates a fresh directory `<parent>/<prefix>XXXXXX` (mode 0700) and returns its path.
    static func makeTemporaryDirectory(in parent: String, prefix: String) throws -> String {
        var template = Array("\(parent)/\(prefix)XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else {
            throw POSIXFailure("mkdtemp \(parent)/\(prefix)")
        }
        return string(from: template)
    }

    /// Creates a fresh file `<parent>/<prefix>XXXXXX` and returns its descriptor and path.
    static func makeTemporaryFile(in parent: String, prefix: String) throws -> (fd: Int32, path: String) {
        var template = Array("\(parent)/\(prefix)XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { cshims_mkstemp_cloexec($0.baseAddress!) }
        guard fd >= 0 else { throw POSIXFailure("mkstemp \(parent)/\(prefix)") }
        return (fd, string(from: template))
    }

    private static func string(from template: [CChar]) -> String {
        String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Removes a file or a directory tree; missing paths are fine.
    static func remove(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// fsyncs a file or directory by path.
    static func sync(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(path)") }
    }

    /// Flushes the whole filesystem holding `path`: one call instead of an fsync per extracted file.
    static func syncFilesystem(containing path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        guard cshims_syncfs(fd) == 0 else { throw POSIXFailure("syncfs \(path)") }
    }

    /// Renames atomically and makes the rename durable by syncing the destination's directory.
    static func renameDurably(_ from: String, to: String) throws {
        guard rename(from, to) == 0 else { throw POSIXFailure("rename \(from) -> \(to)") }
        try sync(parent(of: to))
    }

    /// Writes `data` to `path` atomically: temp file, fsync, rename, fsync of the directory.
    static func writeAtomically(_ data: Data, to path: String, mode: mode_t = 0o644) throws {
        let dir = parent(of: path)
        let (fd, temp) = try makeTemporaryFile(in: dir, prefix: ".\(name(of: path)).tmp-")
        var closed = false
        do {
            try data.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw POSIXFailure("write \(temp)")
                    }
                    offset += n
                }
            }
            guard fchmod(fd, mode) == 0 else { throw POSIXFailure("chmod \(temp)") }
            guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(temp)") }
            close(fd)
            closed = true
            try renameDurably(temp, to: path)
        } catch {
            if !closed { close(fd) }
            unlink(temp)
            throw error
        }
    }

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func fileSize(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// Bytes available to an unprivileged writer on the filesystem holding `path`.
    static func availableBytes(at path: String) -> Int64? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }

    static func parent(of path: String) -> String {
        let p = (path as NSString).deletingLastPathComponent
        return p.isEmpty ? "." : p
    }

    static func name(of path: String) -> String { (path as NSString).lastPathComponent }

    /// An absolute, standardized form of a user-given path.
    static func absolute(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.path
    }
}
