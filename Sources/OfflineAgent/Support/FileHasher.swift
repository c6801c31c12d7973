import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Streaming SHA-256 of files, in blocks so memory stays flat: the one file hasher the
/// device, the publisher and the servers share.
package enum FileHasher {
    /// The lowercase hex SHA-256 of the whole file at `path`.
    package static func sha256(of path: String) throws -> String {
        try digest(of: path).sha256
    }

    /// The size and lowercase hex SHA-256 of the whole file at `path`, in one pass.
    package static func digest(of path: String) throws -> (size: Int64, sha256: String) {
        var hasher = SHA256()
        let size = try update(&hasher, with: path, upTo: .max)
        return (size, hasher.finalize().hex)
    }

    /// Feeds the first `limit` bytes of a file to `hasher`; returns how many there were.
    @discardableResult
    package static func update(_ hasher: inout SHA256, with path: String, upTo limit: Int64) throws -> Int64 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var remaining = limit
        while remaining > 0 {
            let n: Int
            do { n = try FileDescriptor.read(fd, into: buffer.baseAddress!, count: Int(min(Int64(buffer.count), remaining))) } catch {
                throw POSIXFailure("read \(path)", errno: error.errno)
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            remaining -= Int64(n)
        }
        return limit - remaining
    }
}
