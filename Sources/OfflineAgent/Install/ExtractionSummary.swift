import COfflineLibzip
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
    /// Bytes of file content actually written: all of `bytes` without an object store;
    /// with one, only the objects the store lacked (or copies where it cannot link).
    public var written: Int64 = 0
    /// Files that became hard links to objects already stored.
    public var linked: Int = 0
    /// The object each file entry (by archive index) became; empty without an object store.
    var objectNames: [Int64: String] = [:]
}
