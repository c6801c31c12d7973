import COfflineZlib
import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Decodes a gzip file (`compression: gzip` full packages) with zlib, streaming in
/// blocks, hashing the output and refusing output past a cap.
enum GzipDecoder {
    /// Decodes `source` into `destination` (written via a temp file, renamed on success)
    /// and returns the SHA-256 of the decoded bytes.
    static func decode(_ source: String, to destination: String, maxOutputBytes: Int64) throws -> String {
        func fail(_ reason: String, _ cause: OfflineAgentError.Cause, _ underlying: POSIXFailure? = nil) -> OfflineAgentError {
            OfflineAgentError(.download, reason, cause: cause, path: source, underlying: underlying)
        }
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw fail("cannot open compressed package", .io, POSIXFailure("open")) }
        defer { close(input) }
        let (output, temp) = try FileSystem.makeTemporaryFile(in: FileSystem.parent(of: destination), prefix: ".gunzip-")
        var outputOpen = true
        defer { if outputOpen { close(output) } }
        var stream = z_stream()
        guard inflateInit2_(&stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            unlink(temp)
            throw fail("cannot initialise zlib", .unexpected)
        }
        defer { inflateEnd(&stream) }
        let chunk = 256 << 10
        let inBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: chunk)
        let outBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: chunk)
        defer { inBuffer.deallocate(); outBuffer.deallocate() }
        var hasher = SHA256()
        var produced: Int64 = 0
        var finished = false
        do {
            while !finished {
                let n: Int
                do { n = try FileDescriptor.read(input, into: inBuffer, count: chunk) } catch {
                    throw fail("cannot read compressed package", .io, error)
                }
                if n == 0 { throw fail("compressed package is truncated", .archiveCorrupt) }
                stream.next_in = inBuffer
                stream.avail_in = UInt32(n)
                repeat {
                    stream.next_out = outBuffer
                    stream.avail_out = UInt32(chunk)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    guard status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR else {
                        throw fail("corrupt gzip data (zlib status \(status))", .archiveCorrupt)
                    }
                    let count = chunk - Int(stream.avail_out)
                    let (total, overflow) = produced.addingReportingOverflow(Int64(count))
                    guard !overflow, total <= maxOutputBytes else {
                        throw fail("decompressed package exceeds \(maxOutputBytes) bytes", .tooLarge)
                    }
                    produced = total
                    hasher.update(bufferPointer: UnsafeRawBufferPointer(start: outBuffer, count: count))
                    do { try FileDescriptor.writeAll(output, UnsafeRawBufferPointer(start: outBuffer, count: count)) } catch {
                        throw fail(error.isDiskFull ? "disk full while decompressing" : "cannot write package",
                                   error.isDiskFull ? .diskFull : .io, error)
                    }
                    if status == Z_STREAM_END {
                        // Only one member is expected; trailing bytes mean a different file.
                        guard stream.avail_in == 0, read(input, inBuffer, 1) == 0 else {
                            throw fail("unexpected data after the gzip stream", .archiveCorrupt)
                        }
                        finished = true
                        break
                    }
                } while stream.avail_out == 0 || stream.avail_in > 0
            }
            guard fsync(output) == 0 else { throw fail("cannot sync package", .io, POSIXFailure("fsync")) }
            close(output)
            outputOpen = false
            try FileSystem.renameDurably(temp, to: destination)
        } catch {
            unlink(temp)
            throw error
        }
        return hasher.finalize().hex
    }
}
