import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Steps of a rollback (`mark-bad`, `rollback`, an automatic rollback) where the
/// crash-safety tests kill the process, armed by `OFFLINE_AGENT_CRASH_AT` like
/// `CrashPoint` (kept apart: those are the steps of an install).
enum LifecycleCrashPoint: String, CaseIterable {
    /// The version is recorded bad; `current` still names it.
    case afterMarkBad = "after-mark-bad"
    /// `current` names the rollback target; the target's record is not rewritten yet.
    case afterRollbackSwitch = "after-rollback-switch"

    private static let armed = ProcessInfo.processInfo.environment["OFFLINE_AGENT_CRASH_AT"].flatMap(Self.init(rawValue:))

    func hit() {
        if Self.armed == self { kill(getpid(), SIGKILL) }
    }
}
