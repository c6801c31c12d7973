import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension POSIXFailure {
    /// The filesystem or the user's quota is full: `.diskFull`, not `.io`.
    package var isDiskFull: Bool { errno == ENOSPC || errno == EDQUOT }
}
