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
    /// The entry page single-page routes on a mirrored origin get (the manifest's
    /// `fallback`), percent-encoded for `Resolver.file(at:in:)`; nil when none.
    let entryPage: String?
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
        entryPage = installed.fallback.map(Self.percentEncoded)
        self.lock = lock
    }

    /// `path` with every byte but unreserved ones and `/` percent-encoded.
    static func percentEncoded(_ path: String) -> String {
        var encoded = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                encoded += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
            }
        }
        return encoded
    }
}
