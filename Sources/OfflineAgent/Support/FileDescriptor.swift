import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The read and write loops on a raw descriptor, once: `write(2)` may take fewer bytes
/// than asked (pipes, sockets, a signal mid-call) and both calls may fail with `EINTR`,
/// which is no failure at all. Callers turn the `POSIXFailure` into their own error.
package enum FileDescriptor {
    /// Writes every byte of `bytes`, retrying partial writes and `EINTR`.
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(POSIXFailure) {
        guard let base = bytes.baseAddress else { return }
        var done = 0
        while done < bytes.count {
            let n = write(fd, base + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw POSIXFailure("write")
            }
            done += n
        }
    }

    /// Writes every byte of `data`, retrying partial writes and `EINTR`.
    package static func writeAll(_ fd: Int32, _ data: some ContiguousBytes) throws(POSIXFailure) {
        let result: Result<Void, POSIXFailure> = data.withUnsafeBytes { raw in
            Result { () throws(POSIXFailure) in try writeAll(fd, raw) }
        }
        try result.get()
    }

    /// One `read(2)` of at most `count` bytes into `buffer`, retrying `EINTR`; 0 at the end.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int) throws(POSIXFailure) -> Int {
        while true {
            let n = Glibc.read(fd, buffer, count)
            if n >= 0 { return n }
            if errno != EINTR { throw POSIXFailure("read") }
        }
    }
}
