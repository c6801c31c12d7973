import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A listening socket on 127.0.0.1 that hands each accepted connection to its own
/// thread, until `stop`: the accept loop of every raw test server.
package final class LoopbackListener: @unchecked Sendable {
    package let port: Int
    private let fd: Int32
    private let stopped = Mutex(false)

    /// Listens at once; connections wait in the backlog until `start`.
    package init(backlog: Int32 = 64) throws {
        (fd, port) = try LoopbackSocket.listen(backlog: backlog)
    }

    /// Accepts on a thread of its own; `serve` runs on a new thread per connection and
    /// owns (closes) the descriptor.
    package func start(_ serve: @escaping @Sendable (_ client: Int32) -> Void) {
        Thread.detachNewThread { [self] in acceptLoop(serve) }
    }

    /// Stops accepting; safe to call more than once (a second close could hit a reused descriptor).
    package func stop() {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }

    private func acceptLoop(_ serve: @escaping @Sendable (Int32) -> Void) {
        while true {
            let client = accept(fd, nil, nil)
            if client < 0 {
                if stopped.withLock({ $0 }) { return }
                continue
            }
            Thread.detachNewThread { serve(client) }
        }
    }
}
