import OfflineAgent
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// `Resolve`'s reading of the root (`Resolver.activeApps()`: each app's active record, bad
/// mark and kill switch), kept between calls so a call reads only the file its URL names.
///
/// Two guards, either of which drops it: inotify (the bus thread calls `invalidate()` for
/// any change under the root it watches), and, because a watch can fail or miss a file
/// (version records live in `versions/`, which is not watched), a key checked on every
/// call: the apps directory's identity and, per app, `current`'s target and the identities
/// of its record, lifecycle record and check state (a `stat` per file, a `readlink` per
/// app; every writer replaces these files by renaming, so a change is a new inode). The key
/// is taken before the files are read: a change during a reading is a new key next call.
final class ResolveCache: Sendable {
    /// The identity of a file or directory: device, inode, size and nanosecond mtime.
    struct Stamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int

        init?(_ path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            (device, inode, size, seconds, nanoseconds) = (UInt64(st.st_dev), UInt64(st.st_ino), Int64(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        }
    }

    struct Entry: Equatable {
        var app: String
        var current: String?
        var record: Stamp?
        var lifecycle: Stamp?
        var check: Stamp?
    }

    struct Key: Equatable {
        var apps: Stamp?
        var entries: [Entry]
    }

    private struct Kept {
        var generation: UInt64
        var key: Key
        var apps: [ResolvableApp]
    }

    let resolver: Resolver
    private let appsDirectory: String
    private let generation = Atomic<UInt64>(0)
    private let kept = Mutex<Kept?>(nil)

    init(resolver: Resolver) {
        self.resolver = resolver
        appsDirectory = "\(resolver.store.root)/apps"
    }

    /// Something under the root changed (inotify): the next call reads it again.
    func invalidate() {
        generation.add(1, ordering: .releasing)
    }

    /// The apps as `Resolver.resolve` weighs them: the kept reading while neither guard
    /// dropped it, else a new one.
    func apps() -> [ResolvableApp] {
        let generation = generation.load(ordering: .acquiring)
        let previous = kept.withLock { $0 }
        // After an inotify event the apps are listed again: the directory's mtime has the
        // clock's coarse ticks, and two changes within one tick look like none.
        let key = key(listing: previous?.generation == generation ? previous?.key : nil)
        if let previous, previous.generation == generation, previous.key == key { return previous.apps }
        let apps = resolver.activeApps()
        kept.withLock { $0 = Kept(generation: generation, key: key, apps: apps) }
        return apps
    }

    /// The key as the root stands now; the app names are those of `listing` while the
    /// apps directory keeps its identity (no entry added, removed or renamed).
    private func key(listing: Key?) -> Key {
        let directory = Stamp(appsDirectory)
        let names = listing.flatMap { $0.apps == directory && directory != nil ? $0.entries.map(\.app) : nil } ?? resolver.store.apps()
        let lifecycle = Lifecycle(store: resolver.store)
        return Key(apps: directory, entries: names.map { app in
            let appDirectory = "\(appsDirectory)/\(app)"
            let current = Self.readLink("\(appDirectory)/current")
            return Entry(
                app: app, current: current,
                record: current.flatMap { Stamp("\(appDirectory)/\($0).json") },
                lifecycle: Stamp(lifecycle.recordPath(app)),
                check: Stamp(resolver.checkStatePath(app: app)))
        })
    }

    /// The target of a symbolic link, nil when `path` is not one.
    private static func readLink(_ path: String) -> String? {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 4096) { buffer -> String? in
            let n = readlink(path, buffer.baseAddress!, buffer.count)
            guard n > 0, n < buffer.count else { return nil }
            return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: n), as: UTF8.self)
        }
    }
}
