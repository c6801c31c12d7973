import AsyncHTTPClient
import Crypto
import FoundationEssentials
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

/// Streaming SHA-256 of files, in blocks so memory stays flat.
enum FileHasher {
    static func sha256(of path: String) throws -> String {
        var hasher = SHA256()
        try update(&hasher, with: path, upTo: .max)
        return hasher.finalize().hex
    }

    /// Feeds the first `limit` bytes of a file to `hasher`.
    static func update(_ hasher: inout SHA256, with path: String, upTo limit: Int64) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var remaining = limit
        while remaining > 0 {
            let n = read(fd, buffer.baseAddress!, Int(min(Int64(buffer.count), remaining)))
            if n < 0 {
                if errno == EINTR { continue }
                throw POSIXFailure("read \(path)")
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            remaining -= Int64(n)
        }
    }
}
