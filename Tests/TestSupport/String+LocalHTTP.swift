import OfflineAgent
import Foundation
import OfflineServe
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension String {
    /// Percent-encodes for use as one query parameter value.
    package var localQueryEncoded: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed)!
    }
}
