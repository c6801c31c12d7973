import COfflineSDBus
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
    /// The app of each watched app directory, by watch descriptor.
    private let watchedApps = Mutex<[Int32: String]>([:])
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

    /// What the inotify events waiting say: whether anything but a progress record
    /// changed (the root is read again), and the apps whose progress record was replaced.
    struct Events: Equatable {
        var changed = false
        var progress: [String] = []
    }

    /// Reads the inotify events waiting (at most `maxReads` buffers: the loop is not held
    /// by a flood; what is left wakes the next `poll`).
    func drainInotify(maxReads: Int = 16) -> Events {
        guard inotifyFD >= 0 else { return Events() }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var events = Events()
        let apps = watchedApps.withLock { $0 }
        for _ in 0..<maxReads {
            let n = buffer.withUnsafeMutableBytes { read(inotifyFD, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            Self.parse(buffer.prefix(n), apps: apps, into: &events)
        }
        return events
    }

    /// Sorts the `inotify_event`s in `bytes` (the kernel's, but read without trusting a
    /// length): a progress record written in a watched app directory names its app; an
    /// overflow, an event of another file or of an unknown watch says the root changed.
    static func parse(_ bytes: ArraySlice<UInt8>, apps: [Int32: String], into events: inout Events) {
        let header = MemoryLayout<inotify_event>.size
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= header {
            let (wd, mask, length) = bytes[offset..<offset + header].withUnsafeBytes { raw in
                (raw.loadUnaligned(fromByteOffset: 0, as: Int32.self), raw.loadUnaligned(fromByteOffset: 4, as: UInt32.self),
                 Int(raw.loadUnaligned(fromByteOffset: 12, as: UInt32.self)))
            }
            guard length <= bytes.endIndex - offset - header else {
                events.changed = true
                return
            }
            let name = bytes[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }
            offset += header + length
            if mask & UInt32(IN_Q_OVERFLOW) != 0 { events.changed = true; continue }
            let file = String(decoding: name, as: UTF8.self)
            if file == ProgressRecord.temporaryName { continue }
            if file == ProgressRecord.fileName, let app = apps[wd] {
                if mask & UInt32(IN_MOVED_TO | IN_CLOSE_WRITE) != 0, !events.progress.contains(app) { events.progress.append(app) }
                continue
            }
            events.changed = true
        }
    }

    /// Watches `path` for entries created, replaced, written or removed (best effort: a
    /// directory that cannot be watched is still read at every poll). `app`: the directory
    /// is that app's, where its progress record is written.
    func watch(_ path: String, app: String? = nil) {
        guard inotifyFD >= 0 else { return }
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB)
        let wd = inotify_add_watch(inotifyFD, path, mask)
        if wd >= 0, let app { watchedApps.withLock { $0[wd] = app } }
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
