import COfflineLibzip
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Limits that bound what one archive may make the extractor write.
///
/// Every entry is checked against them before anything is written, so an archive
/// breaking one is refused whole.
public struct ExtractionLimits: Sendable, Equatable {
    /// The most bytes all entries together may expand to (default 1 GiB).
    public var maxTotalBytes: Int64
    /// The most entries an archive may hold (default 100 000).
    public var maxEntries: Int
    /// The longest entry name, in UTF-8 bytes, trailing `/` included (default 1024).
    public var maxNameBytes: Int
    /// The longest component of an entry name, in UTF-8 bytes (default 255, the
    /// common file system limit).
    public var maxComponentBytes: Int
    /// The most components (directory levels plus the file) a name may have (default 64).
    public var maxDepth: Int

    /// Limits with the defaults described on each property.
    public init(
        maxTotalBytes: Int64 = 1 << 30, maxEntries: Int = 100_000,
        maxNameBytes: Int = 1024, maxComponentBytes: Int = 255, maxDepth: Int = 64
    ) {
        self.maxTotalBytes = maxTotalBytes
        self.maxEntries = maxEntries
        self.maxNameBytes = maxNameBytes
        self.maxComponentBytes = maxComponentBytes
        self.maxDepth = maxDepth
    }
}
