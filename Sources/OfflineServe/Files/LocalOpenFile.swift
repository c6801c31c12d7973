import FoundationEssentials
import Hummingbird
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// A file of a pinned version, opened once: every byte of a response comes from this
/// descriptor, so a swap or a collection after the open can't mix versions into it.
/// The descriptor closes when the last reference (the response body writer) goes.
final class LocalOpenFile: Sendable {
    let fd: Int32
    let size: Int64
    let inode: UInt64
    let modifiedSeconds: Int
    let modifiedNanoseconds: Int

    /// Opens `path` (already checked by `Resolver.file`) without following a final
    /// symlink; nil unless it is a regular file.
    init?(path: String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            return nil
        }
        self.fd = fd
        size = Int64(st.st_size)
        inode = UInt64(st.st_ino)
        modifiedSeconds = st.st_mtim.tv_sec
        modifiedNanoseconds = st.st_mtim.tv_nsec
    }

    deinit { close(fd) }

    /// Reads exactly `count` bytes at `offset` into a new buffer.
    func read(offset: Int64, count: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var buffer = allocator.buffer(capacity: count)
        try read(offset: offset, count: count, into: &buffer)
        return buffer
    }

    /// Appends exactly `count` bytes at `offset` to `buffer`.
    ///
    /// Package files are immutable once installed, so a short read means the file was
    /// changed behind the store's back: fail rather than send a body of the wrong length.
    func read(offset: Int64, count: Int, into buffer: inout ByteBuffer) throws {
        var done = 0
        while done < count {
            let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - done) { raw -> Int in
                while true {
                    let n = pread(fd, raw.baseAddress, count - done, off_t(offset + Int64(done)))
                    if n >= 0 { return n }
                    if errno != EINTR { throw POSIXFailure("pread") }
                }
            }
            guard got > 0 else { throw POSIXFailure("pread", errno: EIO) }
            done += got
        }
    }
}
