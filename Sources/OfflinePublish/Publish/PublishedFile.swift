import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// The byte length and SHA-256 of a file the publisher wrote.
struct PublishedFile: Sendable, Equatable {
    var size: Int64
    var sha256: String
}
