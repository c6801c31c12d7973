import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// A manifest response ready to send: body, validator and signature.
struct RenderedManifest: Sendable {
    var body: Data
    /// Strong ETag (quoted), derived from the body so equal bodies share it.
    var etag: String
    /// Base64 Ed25519 signature of `body`, when the server has a key.
    var signature: String?
}
