#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Tells `serve` whether anything in the store's watched directories may have changed
/// since it last looked, at the cost of one `poll` of an inotify descriptor (`inotify(7)`).
///
/// Every response checks that the version it serves is still the active one, so a swap,
/// a rewritten record or a new check state is seen by the very next request. Those
/// checks (`LocalVersions`, `LocalMirrors`: a `readlink` and a few `stat`s per request)
/// are skipped while the generation a result was validated at is still current. The
/// kernel queues an event as part of the `rename` or write that makes a change, so a
/// request that arrives after the change finds it queued: the guarantee is unchanged.
///
/// Any event (or a queue overflow) starts a new generation: results made before are
/// checked again once, the old way, and kept for the new generation when they still hold.
/// Watches are added before a result is validated, so a change that lands between the
/// two is an event, never missed. Where inotify is not available (or out of watches),
/// `watch` fails and callers check every time, as before.
package final class LocalStoreWatch: Sendable {
    /// The inotify descriptor; -1 when there is none (every check is made).
    private let descriptor: Int32
    private let current = Atomic<UInt64>(0)
    /// Held while events are read and the generation moved.
    private let drain = Mutex(())
    /// Set while a caller holding `drain` reads events it has not yet counted.
    private let draining = Atomic<Bool>(false)
    /// How many times a drained descriptor started a new generation (tests).
    package let generations = Atomic<Int>(0)

    /// What a change to the store makes in a watched directory: a file or link created,
    /// renamed into or out of it, removed, written or its metadata changed; the directory
    /// itself removed or moved.
    private static let mask = UInt32(
        IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB | IN_CLOSE_WRITE | IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF)

    /// The process's watch, shared by its servers: inotify instances are few per user
    /// (`fs.inotify.max_user_instances`, 128 by default), and an event in one store only
    /// costs the others one check.
    static let shared = LocalStoreWatch()

    /// Whether there is an inotify descriptor to read.
    var isActive: Bool { descriptor >= 0 }

    /// Called between reading events and moving the generation (tests hold a drain there).
    private let drained: (@Sendable () -> Void)?

    /// A watch of its own; `enabled: false` makes one that never watches (callers check every time).
    init(enabled: Bool = true, drained: (@Sendable () -> Void)? = nil) {
        descriptor = enabled ? inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) : -1
        self.drained = drained
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    /// Watches what `serve`'s checks of `apps` read: the apps directory (an app added or
    /// replaced), each app's directory (`current`, the check state, the lifecycle record)
    /// and its versions' (records). Again and again: a watch on a directory that is
    /// already watched is kept, one on a directory that was replaced follows the new one.
    /// False when one of them cannot be watched: results that depend on it must not rely
    /// on the generation.
    func watch(appsDirectory: String, apps: [String]) -> Bool {
        guard descriptor >= 0 else { return false }
        var directories = [appsDirectory]
        for app in apps { directories += ["\(appsDirectory)/\(app)", "\(appsDirectory)/\(app)/versions"] }
        for directory in directories where inotify_add_watch(descriptor, directory, Self.mask) < 0 {
            return false
        }
        return true
    }

    /// The current generation: a new one when events were queued since the last call.
    /// Never blocks on the queue; reads at most 64 KiB of events (a larger backlog starts
    /// a new generation all the same, and the rest is read by the next call).
    ///
    /// While nothing is queued, it costs one `poll` and takes no lock, so the server's
    /// event loops do not contend for it. Events are read and the generation moved under
    /// `drain`, with `draining` set around the read: a caller that finds the queue empty
    /// while another caller has taken events but not yet moved the generation sees the
    /// flag (the kernel's queue lock, taken by both the read and the `poll`, orders the
    /// flag's store before the empty queue: Linux's guarantee, not Swift's), and
    /// waits for the lock, so it never returns the generation from before an event that
    /// was queued before it looked.
    func generation() -> UInt64 {
        guard descriptor >= 0 else { return 0 }
        var queue = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        if poll(&queue, 1, 0) == 0, !draining.load(ordering: .sequentiallyConsistent) {
            return current.load(ordering: .sequentiallyConsistent)
        }
        return drain.withLock { _ in
            draining.store(true, ordering: .sequentiallyConsistent)
            var drained = false
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { buffer in
                for _ in 0..<16 {
                    let n = read(descriptor, buffer.baseAddress!, buffer.count)
                    if n > 0 {
                        drained = true
                    } else if n < 0 && errno == EINTR {
                        continue
                    } else {
                        break
                    }
                }
            }
            if drained {
                self.drained?()
                current.add(1, ordering: .sequentiallyConsistent)
                generations.add(1, ordering: .relaxed)
            }
            draining.store(false, ordering: .sequentiallyConsistent)
            return current.load(ordering: .sequentiallyConsistent)
        }
    }
}
