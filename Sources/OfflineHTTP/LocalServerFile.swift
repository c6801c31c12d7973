import Foundation
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

enum LocalContentType {
    /// Content types by lowercased extension; text types say UTF-8.
    static let byExtension: [String: String] = [
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8", "json": "application/json", "map": "application/json",
        "webmanifest": "application/manifest+json", "txt": "text/plain; charset=utf-8",
        "xml": "application/xml", "csv": "text/csv; charset=utf-8", "md": "text/markdown; charset=utf-8",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
        "webp": "image/webp", "avif": "image/avif", "svg": "image/svg+xml", "ico": "image/x-icon",
        "bmp": "image/bmp", "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
        "eot": "application/vnd.ms-fontobject", "wasm": "application/wasm", "pdf": "application/pdf",
        "mp3": "audio/mpeg", "m4a": "audio/mp4", "ogg": "audio/ogg", "wav": "audio/wav",
        "mp4": "video/mp4", "webm": "video/webm", "zip": "application/zip",
    ]

    /// The content type of a file path by its extension; `application/octet-stream` otherwise.
    static func of(path: String) -> String {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return "application/octet-stream" }
        return byExtension[path[path.index(after: dot)...].lowercased()] ?? "application/octet-stream"
    }
}

enum LocalHTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Seconds since 1970 of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only
    /// form a client may generate (RFC 9110 §5.6.7); nil for anything else, which makes
    /// `If-Modified-Since` ignored.
    static func parse(_ text: String) -> Int? {
        let parts = text.trimmingWhitespace().split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT",
              let day = Int(parts[1]), let month = months.firstIndex(of: parts[2].lowercased()),
              let year = Int(parts[3]), year >= 1970 else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        var parts_ = tm()
        parts_.tm_year = Int32(year - 1900)
        parts_.tm_mon = Int32(month)
        parts_.tm_mday = Int32(day)
        parts_.tm_hour = Int32(hour)
        parts_.tm_min = Int32(minute)
        parts_.tm_sec = Int32(second)
        return Int(timegm(&parts_))
    }
}
