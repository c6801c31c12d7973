import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Where the report durability tests kill the process, as `CrashPoint` does for installs
/// (kept apart: a sync without reports never reaches it). With
/// `OFFLINE_AGENT_CRASH_AT=before-report-post`, SIGKILL once an event is queued
/// (fsync'd) and its batch is about to be posted.
enum ReportCrashPoint: String {
    case beforePost = "before-report-post"

    private static let armed = ProcessInfo.processInfo.environment["OFFLINE_AGENT_CRASH_AT"].flatMap(ReportCrashPoint.init(rawValue:))

    func hit() {
        if Self.armed == self { kill(getpid(), SIGKILL) }
    }
}
