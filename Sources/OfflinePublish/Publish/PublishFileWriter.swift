import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Writes a new file (never replacing one), hashing and counting the bytes as they
/// go so nothing is read back; `finish` flushes it to disk.
final class PublishFileWriter {
    let path: String
    private var fd: Int32
    private var hasher = SHA256()
    private var count: Int64 = 0

    init(creating path: String) throws {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw PublishError(.publish, "cannot create file", path: path, underlying: POSIXFailure("open")) }
        self.path = path
    }

    deinit { if fd >= 0 { close(fd) } }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { return }
        hasher.update(bufferPointer: bytes)
        count += Int64(bytes.count)
        do { try FileDescriptor.writeAll(fd, bytes) } catch {
            throw PublishError(.publish, "cannot write file", cause: error.isDiskFull ? .diskFull : .publish, path: path, underlying: error)
        }
    }

    func write(_ data: Data) throws {
        try data.withUnsafeBytes { try write($0) }
    }

    func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// fsyncs and closes the file, returning its size and hash.
    func finish() throws -> PublishedFile {
        defer { close(fd); fd = -1 }
        guard fsync(fd) == 0 else { throw PublishError(.publish, "cannot flush file", path: path, underlying: POSIXFailure("fsync")) }
        return PublishedFile(size: count, sha256: hasher.finalize().hex)
    }

    /// The size and SHA-256 of an existing file, read in chunks.
    static func digest(of path: String) throws -> PublishedFile {
        do {
            let (size, sha256) = try FileHasher.digest(of: path)
            return PublishedFile(size: size, sha256: sha256)
        } catch {
            throw PublishError(.publish, "cannot read file", path: path, underlying: error as? POSIXFailure)
        }
    }
}
