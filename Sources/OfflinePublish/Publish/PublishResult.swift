import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// What one publish produced.
public struct PublishResult: Sendable {
    /// `<publishDirectory>/<app>`.
    public var appDirectory: String
    /// The app's state after the publish (also in `state.json`).
    public var state: PublishState
    /// The new release (package and its gzip).
    public var release: PublishState.Release
    /// Patches from previous versions to the new one.
    public var patches: [PublishState.Patch]
    /// The static manifest and its signature file (nil when unsigned).
    public var manifestPath: String
    public var signaturePath: String?
}
