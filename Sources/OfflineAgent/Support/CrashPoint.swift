import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Named steps of an install where the crash-safety tests kill the process:
/// with `OFFLINE_AGENT_CRASH_AT=<name>` set, reaching that step sends SIGKILL to
/// ourselves, exactly like a power cut or an OOM kill at that instant.
enum CrashPoint: String, CaseIterable {
    case afterManifest = "after-manifest"
    case afterDownload = "after-download"
    case afterPatch = "after-patch"
    /// A streamed patch just named a new object in `objects/`, mid-stream: no version links it.
    case afterPatchObjectWritten = "after-patch-object-written"
    /// A streamed patch's output matched `packageSha256`; its skeleton is written, no tree yet.
    case afterPatchVerified = "after-patch-verified"
    case duringExtract = "during-extract"
    /// A new file's bytes are in the staging tree, not yet named in `objects/`.
    case afterObjectWritten = "after-object-written"
    /// A new file just got its name in `objects/`: an object no version links yet.
    case afterObjectStored = "after-object-stored"
    /// An existing object was just linked into the staging tree.
    case afterObjectLinked = "after-object-linked"
    /// The staging tree is complete and flushed, not yet renamed to the version's name.
    case beforeTreeRename = "before-tree-rename"
    case afterExtract = "after-extract"
    case afterKeepPackage = "after-keep-package"
    case afterRecord = "after-record"
    case afterLinkCreated = "after-link-created"
    case afterSwap = "after-swap"
    case afterGarbageCollection = "after-gc"
    /// TUF metadata store (`TUFClient.refresh`): a verified root of the chain was just kept.
    case afterTUFRoot = "after-tuf-root"
    /// A new trusted timestamp was just kept; its snapshot not yet.
    case afterTUFTimestamp = "after-tuf-timestamp"
    /// A new trusted snapshot was just kept; its targets not yet.
    case afterTUFSnapshot = "after-tuf-snapshot"
    /// New trusted targets were just kept; the manifest not yet fetched.
    case afterTUFTargets = "after-tuf-targets"

    /// The points a TUF refresh reaches (`TUFCrashTests`); the others are an install's.
    static let tuf: [CrashPoint] = [.afterTUFRoot, .afterTUFTimestamp, .afterTUFSnapshot, .afterTUFTargets]

    private static let armed = ProcessInfo.processInfo.environment["OFFLINE_AGENT_CRASH_AT"].flatMap(CrashPoint.init(rawValue:))

    func hit() {
        if Self.armed == self { kill(getpid(), SIGKILL) }
    }
}
