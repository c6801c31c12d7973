import Foundation

/// A step of a sync, for progress display.
///
/// Every sync's events end with one `.done` event of its app, whatever the outcome.
/// `app` tells the apps of a batch (`Agent.sync(_:concurrency:progress:)`) apart.
public struct ProgressEvent: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case checking, downloading, patching, extracting, installing, done
    }

    /// The app the sync is for.
    public var app: String
    public var phase: Phase
    /// Bytes done and expected, for downloads; 0 otherwise.
    public var completed: Int64
    public var total: Int64

    public init(app: String, phase: Phase, completed: Int64 = 0, total: Int64 = 0) {
        self.app = app
        self.phase = phase
        self.completed = completed
        self.total = total
    }
}
