import FoundationEssentials
import OfflineAgent
import OfflineHTTP
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Pins active versions per request (`LocalPin`), cheaply, with the kill-switch
/// decision (`Resolver.fallbackReason`) for each.
///
/// The first request after a change validates the (link target, record file identity,
/// check state identity) triple with `Store.active`, decides the gate, takes the shared
/// lock and keeps that pin; later requests share it while `readlink` of `current` and a
/// `stat` of the record and of the check state still give the same triple, so a swap, a
/// rewritten record (new rollout) or a new check state (new known miniVersion) is seen
/// by the very next request, and each response holds its pin until its body is written.
/// Identities are taken before the files are read: a change after that is a new triple.
///
/// The kept pin is replaced by the first request after a swap: until then (an idle
/// server) the version that was active at the last request stays locked, and the next
/// collection after that request removes it instead.
final class LocalVersions: Sendable {
    private struct Key: Equatable {
        var target: String
        var record: FileFingerprint
        /// The check state's identity; nil when the file is missing.
        var check: FileFingerprint?

        init(target: String, _ st: stat, check: FileFingerprint?) {
            self.target = target
            record = FileFingerprint(st)
            self.check = check
        }
    }

    /// A kept pin: what it was validated against, and the path of its check state (made once).
    private struct Kept {
        var key: Key
        var pin: LocalPin
        var checkPath: String
    }

    let resolver: Resolver
    var store: Store { resolver.store }
    private let appsDirectory: String
    private let pins = Mutex<[String: Kept]>([:])

    init(resolver: Resolver) {
        self.resolver = resolver
        appsDirectory = "\(resolver.store.root)/apps"
    }

    /// Pins the active version of `app`, or nil when none is usable (no active version, or
    /// its record or directory gone).
    func pin(_ app: String) -> LocalPin? {
        guard AppName.isValid(app) else { return nil }
        if let pin = keptPin(app) { return pin }
        let appDirectory = "\(appsDirectory)/\(app)"
        // Two tries: a swap plus collection may land between reading the link and locking.
        for _ in 0..<2 {
            guard let target = Self.readLink("\(appDirectory)/current") else {
                pins.withLock { $0[app] = nil }
                return nil
            }
            let kept = pins.withLock { $0[app] }
            let checkPath = kept?.checkPath ?? resolver.checkStatePath(app: app)
            guard target.hasPrefix("versions/"), let version = Version(String(target.dropFirst("versions/".count))) else {
                pins.withLock { $0[app] = nil }
                return nil
            }
            let directory = "\(appDirectory)/versions/\(version)"
            let record = "\(directory).json"
            // A new version or record: lock it, then check the record is still the one locked.
            var st = stat()
            guard stat(record, &st) == 0, let readerLock = ReaderLock.shared(record) else { continue }
            var locked = stat()
            guard stat(record, &locked) == 0, FileFingerprint(locked) == FileFingerprint(st) else { continue }
            // Before reading it: a check state written after this stat makes a new key.
            let check = FileFingerprint(path: checkPath)
            // The store's own check: the record decodes and names the linked version.
            guard let active = store.active(app), active.version.description == version.description else {
                pins.withLock { $0[app] = nil }
                return nil
            }
            var dir = stat()
            guard stat(directory, &dir) == 0, (dir.st_mode & S_IFMT) == S_IFDIR else { continue }
            let pin = LocalPin(
                app: app, installed: active, directory: directory, record: record, recordIdentity: FileFingerprint(st),
                fallback: resolver.fallbackReason(app: app, installed: active), lock: readerLock)
            pins.withLock {
                $0[app] = Kept(key: Key(target: target, st, check: check), pin: pin, checkPath: checkPath)
            }
            return pin
        }
        return nil
    }

    /// Pins `version` of `app`, kept but not active: the version a recorded rollback is
    /// switching to (`LocalLifecycle.rollbackTarget`), served in the moment before `current`
    /// names it. Not kept: the switch ends that moment.
    func pin(_ app: String, version: Version) -> LocalPin? {
        let directory = store.versionDirectory(app, version)
        let record = "\(directory).json"
        var st = stat(), locked = stat(), dir = stat()
        guard stat(record, &st) == 0, let readerLock = ReaderLock.shared(record),
              stat(record, &locked) == 0, FileFingerprint(locked) == FileFingerprint(st),
              let installed = store.metadata(app, version), installed.version == version,
              stat(directory, &dir) == 0, (dir.st_mode & S_IFMT) == S_IFDIR
        else { return nil }
        return LocalPin(
            app: app, installed: installed, directory: directory, record: record, recordIdentity: FileFingerprint(st),
            fallback: resolver.fallbackReason(app: app, installed: installed), lock: readerLock)
    }

    /// The kept pin of `app` while `current`, its record and the check state are those it
    /// was pinned with; nil when `pin` has work to do (a first request, a change), which
    /// may wait for a lock: a `readlink` and two `stat`s, never a lock or a read.
    private func keptPin(_ app: String) -> LocalPin? {
        guard let kept = pins.withLock({ $0[app] }),
              let target = Self.readLink("\(appsDirectory)/\(app)/current"), Self.holds(kept, target: target)
        else { return nil }
        return kept.pin
    }

    /// True when the kept pin still stands for `current` linking to `target`.
    private static func holds(_ kept: Kept, target: String) -> Bool {
        guard kept.key.target == target else { return false }
        var st = stat()
        return stat(kept.pin.record, &st) == 0 && Key(target: target, st, check: FileFingerprint(path: kept.checkPath)) == kept.key
    }

    /// The target of a symbolic link, nil when `path` is not one.
    static func readLink(_ path: String) -> String? {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 4096) { buffer -> String? in
            let n = readlink(path, buffer.baseAddress!, buffer.count)
            guard n > 0, n < buffer.count else { return nil }
            return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: n), as: UTF8.self)
        }
    }
}
