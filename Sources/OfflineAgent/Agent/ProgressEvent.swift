import FoundationEssentials

/// A step of a sync, for progress display.
public struct ProgressEvent: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case checking, downloading, patching, extracting, installing, done
    }

    public var app: String
    public var phase: Phase
    /// Bytes done and expected, for downloads; 0 otherwise.
    public var completed: Int64
    public var total: Int64
}
