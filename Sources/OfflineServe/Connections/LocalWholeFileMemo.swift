import NIOCore
import Synchronization

/// The whole-file answers one event loop made (`LocalServerResponder.WholeFileAnswer`),
/// kept for the next plain `GET` that names the same `Host` value and path while the
/// store's watch generation (`LocalStoreWatch`) is the one every check behind the answer
/// held for.
///
/// Such a repeat skips the route, the pin, the lifecycle record, the file cache and the
/// metrics' series lookups, and with them the locks the server's loops share: what is
/// left per request is the watch's `poll`, so a swap, a rollback, a bad mark or the kill
/// switch is still seen by the very next request (any event moves the generation, and
/// everything kept here is dropped). An answer whose checks are made on every request
/// (no inotify, a directory that could not be watched) is never kept.
///
/// Used only on its loop (`LocalRawResponder`), so it takes no lock. Bounded by
/// entries and by bytes: its answers' bodies (shared with `LocalFileCache`, which may
/// drop them first) and its keys (a `Host` and a path may each be as long as a head):
/// past either bound, it starts again empty.
final class LocalWholeFileMemo {
    private struct Key: Hashable {
        var host: String
        var path: String
    }

    static let limit = 1024
    static let byteLimit = 16 << 20

    private var answers: [Key: (answer: LocalServerResponder.WholeFileAnswer, bytes: Int)] = [:]
    private var bytes = 0
    /// The generation the kept answers held for.
    private var generation: UInt64 = 0

    /// The answer kept for `host` and `path`, when `generation` is still the one it held for.
    func answer(host: String, path: String, generation: UInt64) -> LocalServerResponder.WholeFileAnswer? {
        guard generation == self.generation else {
            forget(since: generation)
            return nil
        }
        return answers[Key(host: host, path: path)]?.answer
    }

    /// Keeps `answer` for `host` and `path` when it holds for `generation`, the
    /// generation read before it was made.
    func keep(_ answer: LocalServerResponder.WholeFileAnswer, host: String, path: String, generation: UInt64) {
        guard answer.heldFor == generation else { return }
        if generation != self.generation { forget(since: generation) }
        let size = answer.content.body.readableBytes + host.utf8.count + path.utf8.count
        if answers.count >= Self.limit || bytes + size > Self.byteLimit { forget(since: generation) }
        if let previous = answers.updateValue((answer, size), forKey: Key(host: host, path: path)) {
            bytes -= previous.bytes
        }
        bytes += size
    }

    private func forget(since generation: UInt64) {
        answers.removeAll(keepingCapacity: true)
        bytes = 0
        self.generation = generation
    }

    /// Kept answers (tests).
    var count: Int { answers.count }
}

extension LocalWholeFileMemo {
    /// One memo per event loop of a server, handed to each connection's
    /// `LocalRawResponder` when its pipeline is built (on that loop).
    final class Loops: Sendable {
        private let memos = Mutex<[ObjectIdentifier: NIOLoopBound<LocalWholeFileMemo>]>([:])

        init() {}

        /// `loop`'s memo, made on first use; called on `loop`.
        func memo(on loop: any EventLoop) -> LocalWholeFileMemo {
            let bound = memos.withLock { memos in
                if let bound = memos[ObjectIdentifier(loop)] { return bound }
                let bound = NIOLoopBound(LocalWholeFileMemo(), eventLoop: loop)
                memos[ObjectIdentifier(loop)] = bound
                return bound
            }
            return bound.value
        }
    }
}
