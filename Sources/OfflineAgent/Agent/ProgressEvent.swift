import Foundation

/// A step of a sync, for progress display.
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

    /// The app being synced.
    public var app: String
    /// The step reached.
    public var phase: Phase
    /// Bytes done and expected, for downloads; 0 otherwise.
    public var completed: Int64
    /// Bytes expected, for downloads; 0 otherwise.
    public var total: Int64
}
