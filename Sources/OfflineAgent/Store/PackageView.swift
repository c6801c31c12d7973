import Crypto
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An installed package read back from its skeleton and the store's objects, byte for
/// byte the zip that was installed, without that zip on disk: the old input of the next
/// patch. Reads are thread-safe (one at a time, under `openObjects`' lock), as cbspatch's
/// prefetch worker reads beside the applying thread.
final class PackageView: Sendable {
    let skeleton: PackageSkeleton
    /// The skeleton file, owned.
    private let fd: Int32
    /// `<root>/objects`, owned.
    private let objectsFD: Int32
    /// The objects read last, kept open: a patch reads old in thousands of small pieces,
    /// mostly from the object it read before, and an `openat` per piece cost the patch's
    /// old reader more than its reads. Owned: closed when evicted and in `deinit`.
    private let openObjects = Mutex(OpenObjects())

    /// A few open objects by segment index, the oldest replaced first.
    private struct OpenObjects: ~Copyable {
        static let capacity = 8
        var segments = [Int](repeating: -1, count: capacity)
        var fds = [Int32](repeating: -1, count: capacity)
        var next = 0

        /// The descriptor of `segment`'s object, opened (and cached) if it is not open.
        mutating func descriptor(of segment: Int, name: String, in directory: Int32) -> Int32 {
            if let slot = segments.firstIndex(of: segment) { return fds[slot] }
            let fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return -1 }
            if fds[next] >= 0 { close(fds[next]) }
            (segments[next], fds[next]) = (segment, fd)
            next = (next + 1) % Self.capacity
            return fd
        }

        deinit {
            for fd in fds where fd >= 0 { close(fd) }
        }
    }

    /// Opens `skeletonPath` and checks it; nil when it is missing or malformed.
    init?(skeletonPath: String, objectsDirectory: String) {
        let fd = open(skeletonPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG,
              let skeleton = PackageSkeleton.read(fd, fileSize: Int64(st.st_size)) else {
            close(fd)
            return nil
        }
        let objectsFD = open(objectsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard objectsFD >= 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
        self.objectsFD = objectsFD
        self.skeleton = skeleton
    }

    deinit {
        close(fd)
        close(objectsFD)
    }

    var size: Int64 { skeleton.packageSize }

    /// Fills `buffer` with up to `count` bytes of the package from `offset`; fewer only at
    /// its end. -1 with errno set when a piece cannot be read in full (EIO for an object
    /// shorter than the skeleton says: it was truncated after the install).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) -> Int {
        guard offset >= 0, count >= 0 else {
            errno = EINVAL
            return -1
        }
        return openObjects.withLock { read(into: buffer, count: count, at: offset, objects: &$0) }
    }

    private func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64, objects: inout OpenObjects) -> Int {
        var filled = 0
        // Bounded: each pass fills at least one byte or returns.
        while filled < count, offset + Int64(filled) < size {
            let position = offset + Int64(filled)
            guard let index = skeleton.segment(at: position) else {
                errno = EIO
                return -1
            }
            let segment = skeleton.segments[index]
            let within = position - segment.start
            let want = Int(min(Int64(count - filled), segment.length - within))
            let target = buffer.advanced(by: filled)
            let got: Int
            switch segment.source {
            case .skeleton(let base):
                got = Self.preadFull(fd, target, want, skeleton.dataOffset + base + within)
            case .object(let name):
                let object = objects.descriptor(of: index, name: name, in: objectsFD)
                guard object >= 0 else { return -1 }
                got = Self.preadFull(object, target, want, within)
            }
            guard got >= 0 else { return -1 }
            guard got == want else {
                errno = EIO
                return -1
            }
            filled += got
        }
        return filled
    }

    /// The SHA-256 of the whole view: what the installed package hashed to, unless an
    /// object or the skeleton changed since.
    func sha256() throws -> String {
        var hasher = SHA256()
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while offset < size {
            let n = read(into: buffer, count: chunk, at: offset)
            guard n > 0 else { throw POSIXFailure("read package view", errno: n < 0 ? errno : EIO) }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(start: buffer, count: n))
            offset += Int64(n)
        }
        return hasher.finalize().hex
    }

    /// The central directory of the package the view stands for.
    /// - Parameter path: names the package in errors.
    func centralDirectory(path: String = "installed package") throws -> [ZipCentralDirectory.Entry] {
        try ZipCentralDirectory.entries(size: UInt64(size), path: path) { offset, count in
            var bytes = [UInt8](repeating: 0, count: count)
            let n = bytes.withUnsafeMutableBytes { read(into: $0.baseAddress!, count: count, at: Int64(offset)) }
            guard n >= 0 else {
                throw OfflineAgentError(.extract, "cannot read the package", cause: .io, path: path, underlying: POSIXFailure("read", errno: errno))
            }
            bytes.removeLast(count - n)
            return bytes
        }
    }

    /// The object and CRC-32 of each stored entry with data, by entry name: what a
    /// streamed patch compares a new entry of the same name with.
    /// Empty when the central directory cannot be read.
    func entryObjects() -> [String: (object: String, crc: UInt32)] {
        guard let directory = try? centralDirectory() else { return [:] }
        var objects: [String: (object: String, crc: UInt32)] = [:]
        for entry in directory where entry.notPlainStored == nil && entry.size > 0 {
            // The entry's local header lies in a skeleton segment; its data is the next segment.
            guard let index = skeleton.segment(at: Int64(entry.localHeaderOffset)), index + 1 < skeleton.segments.count,
                  case .object(let name) = skeleton.segments[index + 1].source,
                  skeleton.segments[index + 1].length == Int64(entry.size) else { continue }
            objects[String(decoding: entry.name, as: UTF8.self)] = (name, entry.crc32)
        }
        return objects
    }

    private static func preadFull(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, _ offset: Int64) -> Int {
        var done = 0
        while done < count {
            let n = pread(fd, buffer.advanced(by: done), count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                return -1
            }
            if n == 0 { break }
            done += n
        }
        return done
    }
}
