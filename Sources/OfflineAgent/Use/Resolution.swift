import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The outcome of resolving one URL.
public enum Resolution: Sendable, Equatable {
    case file(ResolvedFile)
    case network(FallbackReason, app: String?)
}
