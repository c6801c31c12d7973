import FoundationEssentials
import OfflineAgent
import OfflineHTTP
#if canImport(Glibc)
import Glibc
#endif

/// The active version of an app, held for one response: a shared `flock` on the
/// version's record (`ReaderLock`, what garbage collection checks), so garbage collection
/// leaves the directory alone until the last reference goes.
final class LocalPin: Sendable {
    let app: String
    let version: Version
    /// `version` as text, for headers.
    let versionText: String
    /// `<root>/apps/<app>/versions/<version>`: files read from it belong to `version` only.
    let directory: String
    /// The version's record (`<directory>.json`), the file the lock is on.
    let record: String
    /// Modification time of the version's record (rewritten on install and rollback).
    let recordModified: Int
    /// The record file's identity when pinned: a reinstall or rollback writes a new one.
    let recordIdentity: FileFingerprint
    /// Why this version must not be served at all (`Resolver.fallbackReason`: below the
    /// known miniVersion, or this device outside rollout); nil when it may be.
    let fallback: FallbackReason?
    /// The record's whitelist: where a refused request is sent instead.
    let whitelist: [String]
    private let lock: ReaderLock

    init(
        app: String, installed: InstalledVersion, directory: String, record: String, recordIdentity: FileFingerprint,
        fallback: FallbackReason?, lock: ReaderLock
    ) {
        self.app = app
        version = installed.version
        versionText = installed.version.description
        self.directory = directory
        self.record = record
        self.recordModified = recordIdentity.modifiedSeconds
        self.recordIdentity = recordIdentity
        self.fallback = fallback
        whitelist = installed.whitelist
        self.lock = lock
    }
}
