import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A file the manifest names: where it is, its exact size and SHA-256.
struct DownloadTarget: Sendable, Equatable {
    var url: URL
    var size: Int64
    /// Nil when the manifest gives no hash of this file (a compressed full package
    /// without `fullSha256`): the caller then checks what it decodes to.
    var sha256: String?

    /// The name the download is kept under: its hash, or one derived from its URL.
    var key: String { sha256 ?? "unverified-" + SHA256.hash(data: Data(url.absoluteString.utf8)).hex }
}
