import COfflineSDBus
import OfflineAgent
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The bus thread's mailbox: work other threads hand to the thread that owns the
/// connection (replies, signals), an eventfd that wakes its `poll`, and the inotify
/// descriptor it watches the root with.
final class BusLoop: Sendable {
    typealias Job = @Sendable (BusDispatcher) -> Void

    let wakeFD: Int32
    let inotifyFD: Int32
    private let jobs = Mutex<[Job]>([])
    /// The directories watched (read and written on the bus thread and by the readings).
    private let watched = Mutex(Watches())
    private let exit = Mutex<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    init() throws(BusError) {
        wakeFD = c_sdbus_eventfd()
        inotifyFD = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard wakeFD >= 0 else { throw BusError(name: DBusNames.errorName(.io), message: "eventfd: \(Errno.describe(errno))") }
    }

    deinit {
        close(wakeFD)
        if inotifyFD >= 0 { close(inotifyFD) }
    }

    /// Runs `job` on the bus thread, soon.
    func enqueue(_ job: @escaping Job) {
        jobs.withLock { $0.append(job) }
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// The jobs waiting, oldest first; the mailbox is left empty.
    func takeJobs() -> [Job] {
        jobs.withLock { jobs in
            defer { jobs = [] }
            return jobs
        }
    }

    func clearWake() {
        var count: UInt64 = 0
        _ = read(wakeFD, &count, 8)
    }

    /// What the inotify events waiting say: which apps changed (their directory's entries),
    /// whether anything else under the root did (`full`: the root, `apps/`, an overflow; the
    /// whole root is read again), the apps whose progress record was replaced, and the app
    /// directories that appeared in `apps/` (watched at once: a first sync writes its record
    /// there as soon as it made the directory).
    struct Events: Equatable {
        var full = false
        var apps: [String] = []
        var progress: [String] = []
        var created: [String] = []
        var changed: Bool { full || !apps.isEmpty }
    }

    /// Reads the inotify events waiting (at most `maxReads` buffers: the loop is not held
    /// by a flood; what is left wakes the next `poll`).
    func drainInotify(maxReads: Int = 16) -> Events {
        guard inotifyFD >= 0 else { return Events() }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var events = Events()
        let before = watched.withLock { $0 }
        var watches = before
        for _ in 0..<maxReads {
            let n = buffer.withUnsafeMutableBytes { read(inotifyFD, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            Self.parse(buffer.prefix(n), watches: &watches, into: &events)
        }
        // Watches the kernel dropped (their directory went) are forgotten: the app may come back.
        let dropped = Set(before.apps.keys).subtracting(watches.apps.keys)
        let appsDropped = before.appsDirectory >= 0 && watches.appsDirectory < 0
        if !dropped.isEmpty || appsDropped {
            watched.withLock { watched in
                for wd in dropped { watched.apps[wd] = nil }
                if appsDropped, watched.appsDirectory == before.appsDirectory { watched.appsDirectory = -1 }
            }
        }
        return events
    }

    /// The directories watched: the app of each app directory, by watch descriptor, and
    /// the descriptor of `apps/`.
    struct Watches: Equatable {
        var apps: [Int32: String] = [:]
        var appsDirectory: Int32 = -1
    }

    /// Sorts the `inotify_event`s in `bytes` (the kernel's, but read without trusting a
    /// length): a progress record written in a watched app directory names its app, any
    /// other entry of it changes that app; a new directory in `apps/` with an app's name is
    /// `created`; an overflow, an event of the root, of `apps/` or of an unknown watch says
    /// the root changed. A watch the kernel removed (`IN_IGNORED`) leaves `watches`.
    static func parse(_ bytes: ArraySlice<UInt8>, watches: inout Watches, into events: inout Events) {
        let header = MemoryLayout<inotify_event>.size
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= header {
            let (wd, mask, length) = bytes[offset..<offset + header].withUnsafeBytes { raw in
                (raw.loadUnaligned(fromByteOffset: 0, as: Int32.self), raw.loadUnaligned(fromByteOffset: 4, as: UInt32.self),
                 Int(raw.loadUnaligned(fromByteOffset: 12, as: UInt32.self)))
            }
            guard length <= bytes.endIndex - offset - header else {
                events.full = true
                return
            }
            let name = bytes[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }
            offset += header + length
            if mask & UInt32(IN_Q_OVERFLOW) != 0 { events.full = true; continue }
            if mask & UInt32(IN_IGNORED) != 0 {
                if let app = watches.apps.removeValue(forKey: wd) { append(app, to: &events.apps) }
                if wd == watches.appsDirectory {
                    watches.appsDirectory = -1
                    events.full = true
                }
                continue
            }
            let file = String(decoding: name, as: UTF8.self)
            if file == ProgressRecord.temporaryName { continue }
            if let app = watches.apps[wd] {
                if file == ProgressRecord.fileName {
                    if mask & UInt32(IN_MOVED_TO | IN_CLOSE_WRITE) != 0 { append(app, to: &events.progress) }
                } else {
                    append(app, to: &events.apps)
                }
                continue
            }
            if wd == watches.appsDirectory, mask & UInt32(IN_ISDIR) != 0, mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0,
               AppName.isValid(file) {
                append(file, to: &events.created)
            }
            events.full = true
        }
    }

    private static func append(_ app: String, to list: inout [String]) {
        if !list.contains(app) { list.append(app) }
    }

    /// The app directories watched at most: each takes one of the user's inotify watches
    /// (`fs.inotify.max_user_watches`); an app beyond is read at every poll, with no `Progress`
    /// of other processes' syncs.
    static let maxWatchedApps = 256

    /// Watches `path` for entries created, replaced, written or removed (best effort: a
    /// directory that cannot be watched is still read at every poll). `app`: the directory
    /// is that app's, where its progress record is written; `apps`: it is `apps/`, where
    /// new app directories appear.
    func watch(_ path: String, app: String? = nil, apps: Bool = false) {
        guard inotifyFD >= 0 else { return }
        if let app {
            guard watched.withLock({ $0.apps.count < Self.maxWatchedApps && !$0.apps.values.contains(app) }) else { return }
        }
        // Never through a link: an app directory that is one is not the agent's.
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB | IN_ONLYDIR | IN_DONT_FOLLOW)
        let wd = inotify_add_watch(inotifyFD, path, mask)
        guard wd >= 0 else { return }
        watched.withLock { watched in
            if let app { watched.apps[wd] = app }
            if apps { watched.appsDirectory = wd }
        }
    }

    /// Whether `apps/` is watched.
    var watchesAppsDirectory: Bool { watched.withLock { $0.appsDirectory >= 0 } }

    /// Whether `app`'s directory is watched.
    func isWatched(_ app: String) -> Bool {
        watched.withLock { $0.apps.values.contains(app) }
    }

    /// Runs `body` on a thread of its own (the bus thread); false when no thread could be made.
    static func spawn(_ body: @escaping @Sendable () -> Void) -> Bool {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let r = pthread_create(&thread, nil, { argument in
            Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().body()
            return nil
        }, box)
        guard r == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }

    /// Called by the bus thread as it ends.
    func markExited() {
        let waiters = exit.withLock { state in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the bus thread has ended.
    func exited() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = exit.withLock { state in
                if !state.done { state.waiters.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }
}
