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
/// While the store's watched directories have no event (`LocalStoreWatch`), those
/// `readlink` and `stat`s are skipped: the kept pin still stands.
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

    /// A kept pin: what it was validated against, the path of its check state (made
    /// once), and the watch generation it holds for (nil: checked on every request).
    private struct Kept {
        var key: Key
        var pin: LocalPin
        var checkPath: String
        var generation: UInt64?
    }

    let resolver: Resolver
    var store: Store { resolver.store }
    private let appsDirectory: String
    let watch: LocalStoreWatch
    private let pins = Mutex<[String: Kept]>([:])
    /// How many times a kept pin was checked against the files (tests: none while the store is unchanged).
    package let checks = Atomic<Int>(0)

    init(resolver: Resolver, watch: LocalStoreWatch) {
        self.resolver = resolver
        self.watch = watch
        appsDirectory = "\(resolver.store.root)/apps"
    }

    /// Pins the active version of `app`, or nil when none is usable (no active version, or its record or directory gone).
    func pin(_ app: String) -> LocalPin? {
        guard AppName.isValid(app) else { return nil }
        if let pin = keptPin(app) { return pin }
        let appDirectory = "\(appsDirectory)/\(app)"
        // Two tries: a swap plus collection may land between reading the link and locking.
        for _ in 0..<2 {
            // Watched before anything is read: a change from here on is an event.
            let watched = watch.watch(appsDirectory: appsDirectory, apps: [app])
            let generation = watch.generation()
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
                $0[app] = Kept(key: Key(target: target, st, check: check), pin: pin, checkPath: checkPath, generation: watched ? generation : nil)
            }
            return pin
        }
        return nil
    }

    /// The kept pin of `app` while `current`, its record and the check state are those it
    /// was pinned with; nil when `pin` has work to do (a first request, a change), which
    /// may wait for a lock. For the event loop (`LocalImmediateResponder`): a `readlink`
    /// and two `stat`s, never a lock or a read.
    ///
    /// While nothing in the app's directories changed (`LocalStoreWatch`), the kept pin
    /// is returned after one `poll` of the watch instead. After a change anywhere in the
    /// store, the pin is checked once the old way and, when it holds, kept for the new
    /// generation.
    ///
    /// `generation`: the watch's, read earlier in the same request (one `read` per request).
    func keptPin(_ app: String, generation now: UInt64? = nil) -> LocalPin? {
        guard let kept = pins.withLock({ $0[app] }) else { return nil }
        if let generation = kept.generation, generation == now ?? watch.generation() { return kept.pin }
        checks.add(1, ordering: .relaxed)
        let watched = watch.watch(appsDirectory: appsDirectory, apps: [app])
        let generation = watch.generation()
        guard let target = Self.readLink("\(appsDirectory)/\(app)/current"), Self.holds(kept, target: target) else { return nil }
        if watched {
            pins.withLock { pins in
                if pins[app]?.pin === kept.pin { pins[app]?.generation = generation }
            }
        }
        return kept.pin
    }

    /// True when `pin` is `app`'s kept pin and holds for `generation` (no check is made on
    /// a request while the generation is unchanged).
    func holds(_ app: String, _ pin: LocalPin, at generation: UInt64) -> Bool {
        pins.withLock { pins in pins[app].map { $0.pin === pin && $0.generation == generation } ?? false }
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
