import COfflineZlib
import Foundation
import OfflineAgent

/// gzip-compresses a package for `compression: gzip` transport with zlib.
///
/// zlib's gzip header carries mtime 0 and no file name when none is set, so the
/// output depends only on the input bytes (and the zlib build): reproducible.
enum PublishGzip {
    /// Compresses the file at `source` into a new file at `destination`.
    static func compress(_ source: String, to destination: String, level: Int32 = 9) throws -> PublishedFile {
        let input: Data
        do {
            input = try Data(contentsOf: URL(fileURLWithPath: source), options: .alwaysMapped)
        } catch {
            throw PublishError(.publish, "cannot read file", path: source)
        }
        let out = try PublishFileWriter(creating: destination)
        var stream = z_stream()
        // windowBits 15 + 16: a gzip wrapper instead of a zlib one.
        guard deflateInit2_(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY,
                            zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw PublishError(.publish, "zlib deflateInit2 failed", path: destination)
        }
        defer { deflateEnd(&stream) }

        let chunk = 256 * 1024
        var buffer = [UInt8](repeating: 0, count: chunk)
        try input.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var offset = 0
            var status: Int32 = Z_OK
            while status != Z_STREAM_END {
                // Feed at most 1 GiB per call: avail_in is 32 bits.
                if stream.avail_in == 0, offset < raw.count {
                    let take = min(raw.count - offset, 1 << 30)
                    stream.next_in = UnsafeMutablePointer(mutating: raw.baseAddress!.advanced(by: offset).assumingMemoryBound(to: Bytef.self))
                    stream.avail_in = uInt(take)
                    offset += take
                }
                let flush = (offset == raw.count) ? Z_FINISH : Z_NO_FLUSH
                let produced = try buffer.withUnsafeMutableBytes { out -> Int in
                    stream.next_out = out.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(chunk)
                    status = deflate(&stream, flush)
                    guard status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR else {
                        throw PublishError(.publish, "zlib deflate failed (\(status))", path: destination)
                    }
                    return chunk - Int(stream.avail_out)
                }
                try buffer.withUnsafeBytes { try out.write(UnsafeRawBufferPointer(rebasing: $0[0..<produced])) }
            }
        }
        return try out.finish()
    }
}
