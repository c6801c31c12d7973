import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The outcome of resolving one URL.
public enum Resolution: Sendable, Equatable {
    /// Serve this file of the active version.
    case file(ResolvedFile)
    /// Load the URL from the network, for this reason; `app` names the app whose
    /// whitelist matched, nil when none did.
    case network(FallbackReason, app: String?)
}
