import AsyncHTTPClient
import FoundationEssentials
import NIOCore

/// What one manifest check returned.
enum ManifestResponse: Sendable {
    /// A signed (when required) and decoded manifest, with the ETag to send next time.
    case manifest(Manifest, etag: String?)
    /// `304 Not Modified`: nothing new.
    case notModified
    /// `429`/`503` with `Retry-After`: no check before this moment.
    case retryAfter(Date)
}
