import CLibzip
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What an extraction produced.
public struct ExtractionSummary: Sendable, Equatable {
    /// Regular files written.
    public var files: Int
    /// Directories made.
    public var directories: Int
    /// Bytes of file content written.
    public var bytes: Int64
}
