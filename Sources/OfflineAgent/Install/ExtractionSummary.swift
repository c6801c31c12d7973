import CLibzip
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What an extraction produced.
public struct ExtractionSummary: Sendable, Equatable {
    public var files: Int
    public var directories: Int
    public var bytes: Int64
}
