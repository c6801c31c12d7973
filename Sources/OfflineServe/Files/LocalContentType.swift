import FoundationEssentials
import Hummingbird
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

package enum LocalContentType {
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
    package static func of(path: String) -> String {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return "application/octet-stream" }
        return byExtension[path[path.index(after: dot)...].lowercased()] ?? "application/octet-stream"
    }
}
