import COfflineShims
import Crypto
#if canImport(Glibc)
import Glibc
#endif

/// The SHA-256 of a byte stream made on a blocking thread (a C callback that cannot
/// await), computed on a thread of its own beside it: the producer copies each piece into
/// one of a few fixed batches and goes on while the thread hashes the batch before.
///
/// A streamed patch's whole output is hashed for `packageSha256`; inline, that hash was
/// a fifth of the applying thread's time on a core the patch leaves mostly idle.
/// (`BackgroundHasher` does the same for a download, whose loop is async: it hands batches
/// to the blocking pool and awaits them. Pool work must not wait for other pool work, so
/// the patch, itself pool work, hashes on a thread of its own.)
///
/// Memory is `batches` × `batchBytes`, whatever the stream. Waits are bounded by the
/// hashing of one batch: the thread only hashes. When no thread can be made, the bytes are
/// hashed inline, with the same result.
///
/// One producer at a time: `update` and `finalize` may be called from different threads
/// only when each call happens after the previous one returned (the blocking pool's
/// awaits order them), hence `@unchecked Sendable`.
final class HashingThread: @unchecked Sendable {
    static let batchBytes = 512 << 10
    static let batches = 3

    /// The thread's own state: raw memory the producer owns and frees once the thread ended,
    /// never a reference to this object (a thread holding one would keep it alive, and its
    /// `deinit` from ever stopping the thread). The producer reads `hasher` only after the join.
    private struct ThreadState {
        let storage: UnsafeMutableRawPointer
        let lengths: UnsafeMutablePointer<Int>
        let ready: UnsafeMutablePointer<sem_t>
        let free: UnsafeMutablePointer<sem_t>
        var hasher = SHA256()
        var threadID: pid_t = 0

        /// The thread: hashes batches in order until the end mark.
        static func run(_ state: UnsafeMutablePointer<ThreadState>) {
            state.pointee.threadID = pid_t(cshims_gettid())
            let (storage, lengths, ready, free) = (state.pointee.storage, state.pointee.lengths, state.pointee.ready, state.pointee.free)
            var next = 0
            while true {
                HashingThread.wait(ready)
                let length = lengths[next]
                if length < 0 { return }
                state.pointee.hasher.update(bufferPointer: UnsafeRawBufferPointer(start: storage + next * HashingThread.batchBytes, count: length))
                next = (next + 1) % HashingThread.batches
                sem_post(free)
            }
        }
    }

    /// The batches, back to back.
    private let storage = UnsafeMutableRawPointer.allocate(byteCount: HashingThread.batches * HashingThread.batchBytes, alignment: 64)
    /// Each batch's length once handed over; -1 marks the end of the stream.
    private let lengths = UnsafeMutablePointer<Int>.allocate(capacity: HashingThread.batches)
    /// Batches ready to hash, and batches free to fill.
    private let ready = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    private let free = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    private let state: UnsafeMutablePointer<ThreadState>
    private var thread: pthread_t?
    /// The batch being filled, and how far.
    private var filling = 0
    private var filled = 0

    /// The hashing thread's kernel id once it ran (tests check that it ends); 0 without one.
    /// Read it only after an `update` that waited for the thread.
    var threadID: pid_t { state.pointee.threadID }

    init() {
        lengths.initialize(repeating: 0, count: Self.batches)
        sem_init(ready, 0, 0)
        sem_init(free, 0, UInt32(Self.batches))
        state = .allocate(capacity: 1)
        state.initialize(to: ThreadState(storage: storage, lengths: lengths, ready: ready, free: free))
        var thread = pthread_t()
        if pthread_create(&thread, nil, { ThreadState.run($0!.assumingMemoryBound(to: ThreadState.self)); return nil }, state) == 0 {
            self.thread = thread
        }
    }

    deinit {
        // A stream abandoned midway (a failed patch): stop the thread before freeing what it reads.
        if thread != nil { _ = finalize() }
        sem_destroy(ready)
        sem_destroy(free)
        ready.deallocate()
        free.deallocate()
        lengths.deallocate()
        storage.deallocate()
        state.deinitialize(count: 1)
        state.deallocate()
    }

    /// Adds `bytes` to the stream (copied: the caller may reuse its buffer at once).
    func update(_ bytes: UnsafeRawBufferPointer) {
        guard thread != nil else {
            state.pointee.hasher.update(bufferPointer: bytes)
            return
        }
        var rest = bytes
        while !rest.isEmpty {
            if filled == 0 { Self.wait(free) }
            let count = min(rest.count, Self.batchBytes - filled)
            (storage + filling * Self.batchBytes + filled).copyMemory(from: rest.baseAddress!, byteCount: count)
            filled += count
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
            if filled == Self.batchBytes { handOver(length: filled) }
        }
    }

    /// The hex SHA-256 of every byte added. Call once, at the end of the stream.
    func finalize() -> String {
        if let thread {
            if filled > 0 { handOver(length: filled) }
            Self.wait(free)
            handOver(length: -1)
            pthread_join(thread, nil)
            self.thread = nil
        }
        return state.pointee.hasher.finalize().hex
    }

    private func handOver(length: Int) {
        lengths[filling] = length
        filling = (filling + 1) % Self.batches
        filled = 0
        sem_post(ready)
    }

    private static func wait(_ semaphore: UnsafeMutablePointer<sem_t>) {
        while sem_wait(semaphore) != 0 && errno == EINTR {}
    }
}
