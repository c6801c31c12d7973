import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Named steps of an install where the crash-safety tests kill the process:
/// with `OFFLINE_AGENT_CRASH_AT=<name>` set, reaching that step sends SIGKILL to
/// ourselves, exactly like a power cut or an OOM kill at that instant. With
/// `OFFLINE_AGENT_FAIL_AT=<name>`, reaching it through `reached()` fails instead (EIO):
/// the failure-injection tests check that every step's failure leaves no object behind.
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
    /// The staging tree is complete, not yet renamed to the version's name (an install
    /// flushes it with the rest of what it wrote, before the swap).
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
    /// A delegated role's verified metadata was just kept; the manifest not yet fetched.
    case afterTUFDelegated = "after-tuf-delegated"

    /// The points a TUF refresh reaches (`TUFCrashTests`); the others are an install's.
    static let tuf: [CrashPoint] = [.afterTUFRoot, .afterTUFTimestamp, .afterTUFSnapshot, .afterTUFTargets, .afterTUFDelegated]

    private static let armed = ProcessInfo.processInfo.environment["OFFLINE_AGENT_CRASH_AT"].flatMap(CrashPoint.init(rawValue:))
    private static let failing = ProcessInfo.processInfo.environment["OFFLINE_AGENT_FAIL_AT"].flatMap(CrashPoint.init(rawValue:))

    /// `OFFLINE_AGENT_PAUSE_AT=<name>` with `OFFLINE_AGENT_PAUSE_FILE=<path>`: reaching that
    /// step creates the file and waits (up to 10 minutes) until it is removed, so a test can
    /// send a real signal while the process is at exactly that step.
    private static let paused: (point: CrashPoint, file: String)? = {
        let environment = ProcessInfo.processInfo.environment
        guard let point = environment["OFFLINE_AGENT_PAUSE_AT"].flatMap(CrashPoint.init(rawValue:)),
              let file = environment["OFFLINE_AGENT_PAUSE_FILE"], !file.isEmpty else { return nil }
        return (point, file)
    }()

    /// The step is reached: killed here when armed to crash (for steps that cannot fail), or
    /// held here when armed to pause.
    func hit() {
        if Self.armed == self { kill(getpid(), SIGKILL) }
        if let paused = Self.paused, paused.point == self,
           FileManager.default.createFile(atPath: paused.file, contents: Data()) {
            // Bounded: a test that never lets go does not leave a process behind for ever.
            var waits = 0
            while waits < 60_000, FileSystem.fileSize(paused.file) != nil {
                usleep(10_000)
                waits += 1
            }
        }
    }

    /// The step is reached: killed here when armed to crash, or an I/O error thrown when
    /// armed to fail, as a real one at this instant would be.
    func reached() throws(POSIXFailure) {
        hit()
        if Self.failing == self { throw POSIXFailure("step \(rawValue) (OFFLINE_AGENT_FAIL_AT)", errno: EIO) }
    }
}
