import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// Where a manifest was asked for, which decides how its URLs are written.
enum ManifestRoute: Hashable, Sendable {
    /// `/manifest?app=NAME`: files are at `NAME/<file>` relative to it.
    case query
    /// `/NAME/manifest`: files are beside it.
    case path
}
