import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The content-addressed file objects of one root (`<root>/objects/`), shared by
/// every version of every app: a version directory is made of hard links to them.
///
/// An object is named by the lowercase hex SHA-256 of its bytes, with `.x` appended for
/// an executable file (mode 0555) so that one inode never has to carry two modes;
/// others are 0444. Objects have no other name than that: the only way to change a
/// version's bytes is to write a new version. An object whose link count is 1 is in
/// no version (or in a staging tree that no longer exists) and is collected under the
/// root's lock.
///
/// Used from the extraction workers at once: every method works on the descriptor of
/// the objects directory and the kernel's atomic `linkat`/`renameat`, never on shared state
/// except the fallback flag.
final class ObjectStore: Sendable {
    /// `<root>/objects`.
    let directory: String
    /// An open descriptor of `directory`, owned.
    private let fd: Int32
    /// Set once hard links failed and files were copied instead (another FS, no hard links).
    private let fallback = Atomic<Bool>(false)

    /// Opens (creating it if needed) `<root>/objects`.
    init(root: String) throws(POSIXFailure) {
        directory = "\(root)/objects"
        if mkdir(directory, 0o755) != 0, errno != EEXIST { throw POSIXFailure("mkdir \(directory)") }
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(directory)") }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Whether any file had to be copied for want of hard links during this store's life.
    var copiedInsteadOfLinking: Bool { fallback.load(ordering: .relaxed) }

    /// The object's name for content `sha256` with or without the executable bit.
    static func name(sha256: String, executable: Bool) -> String { executable ? "\(sha256).x" : sha256 }

    /// The mode every object and every file of a version has.
    static func mode(executable: Bool) -> mode_t { executable ? 0o555 : 0o444 }

    /// Opens the object for reading when it exists as a regular file of exactly `size`
    /// bytes with the expected mode; nil otherwise (missing, truncated, replaced by
    /// something else). The caller compares its bytes before linking it.
    func openCandidate(_ name: String, size: Int64) -> Int32? {
        let object = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard object >= 0 else { return nil }
        var st = stat()
        // A changed mode is damage too: linked, it would make a version file writable.
        guard fstat(object, &st) == 0, st.st_mode & S_IFMT == S_IFREG, Int64(st.st_size) == size,
              st.st_mode & 0o7777 == Self.mode(executable: name.hasSuffix(".x")) else {
            close(object)
            return nil
        }
        return object
    }

    /// Makes `name` in `directoryFD` a hard link to the object. Returns false, after
    /// noting the fallback, when this file system cannot link it (the caller writes a copy).
    func link(_ object: String, into directoryFD: Int32, as name: String) throws(POSIXFailure) -> Bool {
        if linkat(fd, object, directoryFD, name, 0) == 0 {
            try CrashPoint.afterObjectLinked.reached()
            return true
        }
        if Self.cannotLink(errno) {
            fallback.store(true, ordering: .relaxed)
            return false
        }
        throw POSIXFailure("link object \(object)")
    }

    /// Gives the freshly written file `name` of `directoryFD` the object name `object`.
    /// A name already there is an object that failed its check (missing bytes, other
    /// bytes) or, at worst, the same bytes another worker stored a moment ago: either way
    /// the new file takes the name with an atomic rename, and versions that link the old
    /// inode keep it. Without hard links the file simply stays a copy of its own.
    func adopt(_ name: String, in directoryFD: Int32, as object: String) throws(POSIXFailure) {
        if linkat(directoryFD, name, fd, object, 0) == 0 {
            try CrashPoint.afterObjectStored.reached()
            return
        }
        let code = errno
        if Self.cannotLink(code) {
            fallback.store(true, ordering: .relaxed)
            return
        }
        guard code == EEXIST else { throw POSIXFailure("store object \(object)", errno: code) }
        let temp = ".tmp-\(object)-\(UInt64.random(in: 0...UInt64.max))"
        guard linkat(directoryFD, name, fd, temp, 0) == 0 else { throw POSIXFailure("store object \(object)") }
        guard renameat(fd, temp, fd, object) == 0 else {
            let failure = POSIXFailure("replace object \(object)")
            unlinkat(fd, temp, 0)
            throw failure
        }
        try CrashPoint.afterObjectStored.reached()
    }

    /// Creates a new, empty temporary file in `objects/` (`.tmp-stream-…`, mode 0444:
    /// an object's mode) for bytes that will become an object once all are written and
    /// hashed. A crash leaves it to `collectGarbage`, which removes every `.tmp-*`.
    func createTemporary() throws(POSIXFailure) -> (fd: Int32, name: String) {
        let name = ".tmp-stream-\(UInt64.random(in: 0...UInt64.max))"
        let temp = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, Self.mode(executable: false))
        guard temp >= 0 else { throw POSIXFailure("create \(directory)/\(name)") }
        return (temp, name)
    }

    /// Gives the complete temporary file `temp` the object name `object` (rename: an
    /// object of that name failed its check, and versions that link it keep their inode).
    func nameTemporary(_ temp: String, as object: String) throws(POSIXFailure) {
        guard renameat(fd, temp, fd, object) == 0 else { throw POSIXFailure("store object \(object)") }
    }

    /// Removes a temporary file that did not become an object.
    func removeTemporary(_ temp: String) {
        unlinkat(fd, temp, 0)
    }

    /// Errors that mean "no hard link here", not a failure: another file system (EXDEV),
    /// none supported (EPERM on FAT/exFAT, EOPNOTSUPP), or the inode's link limit (EMLINK).
    private static func cannotLink(_ code: Int32) -> Bool {
        code == EXDEV || code == EPERM || code == EOPNOTSUPP || code == EMLINK || code == ENOTSUP
    }

    /// Removes every object no version links (link count 1) and temporary names a
    /// crash left. Callers hold the root lock: no install is adding links meanwhile, and
    /// readers only ever open files through versions, which keep their links.
    /// - Returns: the bytes freed.
    @discardableResult
    func collectGarbage() -> Int64 {
        let dup = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dup >= 0, let stream = fdopendir(dup) else {
            if dup >= 0 { close(dup) }
            return 0
        }
        defer { closedir(stream) }
        var freed: Int64 = 0
        var unused: [String] = []
        // Names are gathered first: unlinking while readdir walks may skip entries.
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            var st = stat()
            guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if name.hasPrefix(".") || st.st_mode & S_IFMT != S_IFREG || st.st_nlink <= 1 {
                unused.append(name)
                if st.st_mode & S_IFMT == S_IFREG { freed += Int64(st.st_size) }
            }
        }
        for name in unused { try? FileSystem.removeTree(in: fd, name: name) }
        return freed
    }

    /// The bytes of all objects (each inode once: objects are never linked to each other).
    func totalBytes() -> Int64 {
        DiskUsage.bytes(under: directory)
    }
}
