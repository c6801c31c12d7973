import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One extraction worker's way of putting entries into a version tree through the
/// object store: each entry is hashed as it is read, an object that already holds
/// those bytes is linked, and only a missing (or damaged) object is written.
///
/// An entry up to `wholeCapacity` bytes is read once into memory: its hash names the
/// object, a candidate object is compared byte for byte with it (cheaper than hashing
/// it again, and it proves the object holds exactly these bytes: a truncated or
/// tampered object is never linked), and a missing one is written from memory. A
/// larger entry is read twice only when its object is missing: once to hash it, once
/// to write it, hashed again so the bytes written are the bytes named. Memory stays at
/// `wholeCapacity` + the chunk buffer per worker whatever the package.
final class ObjectWriter {
    /// Entries up to this size are held whole in memory; typical web files all fit.
    static let wholeCapacity = 4 << 20
    static let chunkSize = 256 << 10

    private let objects: ObjectStore
    private let chunk: UnsafeMutableRawPointer
    private let whole: UnsafeMutableRawPointer
    /// Bytes of file content this worker wrote (new objects and copies).
    private(set) var written: Int64 = 0
    /// Files that became links to existing objects.
    private(set) var linked = 0
    /// The object each entry put so far became, by archive index.
    private(set) var names: [Int64: String] = [:]

    init(objects: ObjectStore) {
        self.objects = objects
        chunk = UnsafeMutableRawPointer.allocate(byteCount: Self.chunkSize, alignment: 16)
        whole = UnsafeMutableRawPointer.allocate(byteCount: Self.wholeCapacity + 1, alignment: 16)
    }

    deinit {
        chunk.deallocate()
        whole.deallocate()
    }

    /// Puts `entry` into the directory `dir` under `name`.
    /// - Throws: `OfflineAgentError` for archive damage, `POSIXFailure` for local failures.
    func put(_ entry: ZipExtractor.Entry, name: String, path: String, archive: ZipArchive, in dir: Int32) throws {
        let executable = entry.mode & 0o111 != 0
        if entry.size <= Int64(Self.wholeCapacity) {
            var hasher = SHA256()
            var filled = 0
            // Read straight into `whole` (no copy), one byte more than it holds allowed for.
            try ZipExtractor.stream(entry, path: path, archive: archive, buffer: whole, bufferSize: Self.wholeCapacity + 1, whole: true) { bytes in
                hasher.update(bufferPointer: bytes)
                filled += bytes.count
            }
            let content = UnsafeRawBufferPointer(start: whole, count: filled)
            let object = ObjectStore.name(sha256: hasher.finalize().hex, executable: executable)
            names[entry.index] = object
            if let candidate = objects.openCandidate(object, size: entry.size),
               try Self.equal(candidate, content, scratch: chunk, count: Self.chunkSize),
               try objects.link(object, into: dir, as: name) {
                linked += 1
                return
            }
            try create(name, in: dir, executable: executable, path: path) { fd in
                do throws(POSIXFailure) { try FileDescriptor.writeAll(fd, content) } catch { throw POSIXFailure("write \(path)", errno: error.errno) }
            }
            try objects.adopt(name, in: dir, as: object)
            return
        }
        // Too large to hold: hash it first, write it only when no good object has it.
        var first = SHA256()
        try ZipExtractor.stream(entry, path: path, archive: archive, buffer: chunk, bufferSize: Self.chunkSize) { first.update(bufferPointer: $0) }
        let digest = first.finalize().hex
        let object = ObjectStore.name(sha256: digest, executable: executable)
        names[entry.index] = object
        if let candidate = objects.openCandidate(object, size: entry.size),
           try Self.hash(candidate, size: entry.size, scratch: chunk, count: Self.chunkSize) == digest,
           try objects.link(object, into: dir, as: name) {
            linked += 1
            return
        }
        var second = SHA256()
        let chunk = self.chunk
        try create(name, in: dir, executable: executable, path: path) { fd in
            try ZipExtractor.stream(entry, path: path, archive: archive, buffer: chunk, bufferSize: Self.chunkSize) { bytes in
                second.update(bufferPointer: bytes)
                do throws(POSIXFailure) { try FileDescriptor.writeAll(fd, bytes) } catch { throw POSIXFailure("write \(path)", errno: error.errno) }
            }
        }
        guard second.finalize().hex == digest else {
            throw OfflineAgentError(.extract, "entry '\(ZipExtractor.quoted(path))' read differently twice", cause: .archiveCorrupt, path: archive.path)
        }
        try objects.adopt(name, in: dir, as: object)
    }

    /// Puts `entry`, whose bytes a streamed patch already made the object `object`
    /// (plain name: the stream cannot know the mode, which only the central directory
    /// gives), into `dir` under `name`: a link, with no read of the entry. An executable
    /// entry needs the `.x` object: an existing one is hashed before it is linked (as
    /// above), a missing one is copied from `object`, hashed as it is copied.
    func link(_ entry: ZipExtractor.Entry, object plain: String, name: String, path: String, in dir: Int32) throws {
        let executable = entry.mode & 0o111 != 0
        let digest = String(plain.prefix(64))
        let object = ObjectStore.name(sha256: digest, executable: executable)
        names[entry.index] = object
        if executable, let candidate = objects.openCandidate(object, size: entry.size),
           try Self.hash(candidate, size: entry.size, scratch: chunk, count: Self.chunkSize) == digest,
           try objects.link(object, into: dir, as: name) {
            linked += 1
            return
        }
        if !executable, try objects.link(object, into: dir, as: name) {
            linked += 1
            return
        }
        // A copy: the `.x` object the store lacks, or a file system that cannot link.
        guard let source = objects.openCandidate(plain, size: entry.size) else {
            throw POSIXFailure("open object \(plain) for \(path)", errno: ENOENT)
        }
        defer { close(source) }
        var hasher = SHA256()
        let chunk = self.chunk
        try create(name, in: dir, executable: executable, path: path) { fd in
            while true {
                let n: Int
                do throws(POSIXFailure) { n = try FileDescriptor.read(source, into: chunk, count: Self.chunkSize) } catch { throw POSIXFailure("read object \(plain)", errno: error.errno) }
                if n == 0 { break }
                let bytes = UnsafeRawBufferPointer(start: chunk, count: n)
                hasher.update(bufferPointer: bytes)
                do throws(POSIXFailure) { try FileDescriptor.writeAll(fd, bytes) } catch { throw POSIXFailure("write \(path)", errno: error.errno) }
            }
        }
        guard hasher.finalize().hex == digest else {
            throw OfflineAgentError(.extract, "object \(plain) of entry '\(ZipExtractor.quoted(path))' changed since it was written", cause: .io)
        }
        if executable { try objects.adopt(name, in: dir, as: object) }
    }

    /// Creates `name` read-only (0444, 0555 when executable: the mode objects have),
    /// lets `fill` write it, and counts its bytes as written.
    private func create(_ name: String, in dir: Int32, executable: Bool, path: String, fill: (Int32) throws -> Void) throws {
        let fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, ObjectStore.mode(executable: executable))
        guard fd >= 0 else { throw POSIXFailure("create \(path)") }
        defer { close(fd) }
        try fill(fd)
        var st = stat()
        if fstat(fd, &st) == 0 { written += Int64(st.st_size) }
        try CrashPoint.afterObjectWritten.reached()
    }

    /// Whether the open object `fd` (closed here) holds exactly `content`.
    static func equal(_ fd: Int32, _ content: UnsafeRawBufferPointer, scratch: UnsafeMutableRawPointer, count: Int) throws -> Bool {
        defer { close(fd) }
        var offset = 0
        while true {
            let n: Int
            do { n = try FileDescriptor.read(fd, into: scratch, count: count) } catch { throw POSIXFailure("read object", errno: error.errno) }
            if n == 0 { return offset == content.count }
            guard n <= content.count - offset, memcmp(scratch, content.baseAddress!.advanced(by: offset), n) == 0 else { return false }
            offset += n
        }
    }

    /// The SHA-256 of the open object `fd` (closed here); "" when it holds more than
    /// `size` bytes (it grew since it was checked: not a match, and the loop ends).
    static func hash(_ fd: Int32, size: Int64, scratch: UnsafeMutableRawPointer, count: Int) throws -> String {
        defer { close(fd) }
        var hasher = SHA256()
        var total: Int64 = 0
        while true {
            let n: Int
            do { n = try FileDescriptor.read(fd, into: scratch, count: count) } catch { throw POSIXFailure("read object", errno: error.errno) }
            if n == 0 { return hasher.finalize().hex }
            total += Int64(n)
            guard total <= size else { return "" }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(start: scratch, count: n))
        }
    }
}
