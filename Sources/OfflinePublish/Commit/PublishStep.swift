import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Named steps of a publisher verb where the crash-safety and race tests stop the
/// process: with `OFFLINE_PUBLISH_CRASH_AT=<name>` reaching the step sends SIGKILL to
/// ourselves (a power cut, an OOM kill, `kill -9`); with `OFFLINE_PUBLISH_PAUSE_AT=<name>`
/// it sends SIGSTOP, so a test can run another verb in between and then SIGCONT us.
/// Unset, each step is one dictionary lookup done once per process.
package enum PublishStep: String, CaseIterable, Sendable {
    /// The state was read (under the lock, when there is one); nothing written yet.
    case afterRead = "after-read"
    /// Every new file is written and flushed in the staging directory.
    case afterStaging = "after-staging"
    /// The first new immutable file (a package, its gzip, a patch) is in the app directory.
    case afterFileLinked = "after-file-linked"
    /// Every new immutable file is in the app directory; `state.json` is still the old one.
    case beforeCommit = "before-commit"
    /// `state.json` is the new one: the verb has happened.
    case afterCommit = "after-commit"
    /// The first derived file (`manifest.json`) is the new one, the others not yet.
    case afterDerivedFile = "after-derived-file"
    /// Every file is in place; the staging directory is not removed yet.
    case beforeCleanup = "before-cleanup"
    /// TUF, after the commit point: an app's new delegated metadata (`N.APP.json`) is
    /// written, the snapshot and timestamp that publish it not yet.
    case afterDelegatedMetadata = "after-delegated-metadata"
    /// TUF, a halt by the halt key: `APP/rollout.json` is written, its metadata not yet.
    case afterRolloutFile = "after-rollout-file"

    private static let crashAt = ProcessInfo.processInfo.environment["OFFLINE_PUBLISH_CRASH_AT"].flatMap(PublishStep.init(rawValue:))
    private static let pauseAt = ProcessInfo.processInfo.environment["OFFLINE_PUBLISH_PAUSE_AT"].flatMap(PublishStep.init(rawValue:))

    /// Stops or kills the process here when a test asked for this step.
    func reached() {
        if Self.crashAt == self { kill(getpid(), SIGKILL) }
        if Self.pauseAt == self { kill(getpid(), SIGSTOP) }
    }
}
