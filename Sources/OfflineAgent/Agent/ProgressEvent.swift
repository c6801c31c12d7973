import FoundationEssentials

/// A step of a sync, for progress display.
///
/// Every sync's events end with one `.done` event of its app, whatever the outcome.
/// `app` tells the apps of a batch (`Agent.sync(_:concurrency:progress:)`) apart.
public struct ProgressEvent: Sendable, Equatable {
    /// The step a sync is in.
    public enum Phase: String, Sendable {
        /// Fetching and checking the manifest.
        case checking
        /// Downloading a patch or package (`completed` of `total` bytes).
        case downloading
        /// Applying a patch.
        case patching
        /// Extracting the package.
        case extracting
        /// Activating the new version.
        case installing
        /// The sync finished (whatever its result).
        case done
    }

    /// The app the sync is for.
    public var app: String
    /// The step reached.
    public var phase: Phase
    /// Bytes done and expected, for downloads; 0 otherwise.
    public var completed: Int64
    /// Bytes expected, for downloads; 0 otherwise.
    public var total: Int64
    /// For a download that resumed a partial file a previous run kept: the bytes it
    /// started from (already counted in `completed`); 0 otherwise.
    public var resumedFrom: Int64

    /// An event; `resumedFrom` only for downloads that resume.
    public init(app: String, phase: Phase, completed: Int64 = 0, total: Int64 = 0, resumedFrom: Int64 = 0) {
        self.app = app
        self.phase = phase
        self.completed = completed
        self.total = total
        self.resumedFrom = resumedFrom
    }
}
