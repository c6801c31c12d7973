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

    /// Reads and discards the inotify events waiting; true when there were any.
    func drainInotify() -> Bool {
        guard inotifyFD >= 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var any = false
        while buffer.withUnsafeMutableBytes({ read(inotifyFD, $0.baseAddress, $0.count) }) > 0 { any = true }
        return any
    }

    /// Watches `path` for entries created, replaced, written or removed (best effort: a
    /// directory that cannot be watched is still read at every poll).
    func watch(_ path: String) {
        guard inotifyFD >= 0 else { return }
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB)
        _ = inotify_add_watch(inotifyFD, path, mask)
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
