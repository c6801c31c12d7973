import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A listening socket on 127.0.0.1 that hands each accepted connection to its own
/// thread, until `stop`: the accept loop of every raw test server. It never touches a
/// descriptor number it has given back (see `stop`).
package final class LoopbackListener: @unchecked Sendable {
    package let port: Int
    private let fd: Int32
    /// `started`: the accept thread owns `fd` and closes it; `stopped`: no more accepting.
    private let state = Mutex((started: false, stopped: false))

    /// Listens at once; connections wait in the backlog until `start`.
    package init(backlog: Int32 = 64) throws {
        (fd, port) = try LoopbackSocket.listen(backlog: backlog)
    }

    /// Accepts on a thread of its own; `serve` runs on a new thread per connection and
    /// owns (closes) the descriptor.
    package func start(_ serve: @escaping @Sendable (_ client: Int32) -> Void) {
        let go = state.withLock { state in
            defer { state.started = true }
            return !state.started && !state.stopped
        }
        guard go else { return }
        Thread.detachNewThread { [self] in acceptLoop(serve) }
    }

    /// Stops accepting; safe to call more than once.
    ///
    /// The descriptor is closed only by the accept thread, once it has left `accept`:
    /// closed here, its number could be reused by another test's socket (another
    /// listener's, in a parallel run) before that thread first calls `accept`, which would
    /// then serve that test's connections with this server's script. `shutdown` wakes a
    /// blocked `accept` (and fails every later one) without freeing the number.
    /// A listener that accepts, reads whatever comes until the peer closes, and never
    /// answers: a server that hangs, for timeout tests. Stop it when done.
    package static func silent() throws -> LoopbackListener {
        let listener = try LoopbackListener()
        listener.start { fd in
            var sink = [UInt8](repeating: 0, count: 4096)
            while recv(fd, &sink, sink.count, 0) > 0 {}
            close(fd)
        }
        return listener
    }

    package func stop() {
        let (first, started) = state.withLock { state in
            defer { state.stopped = true }
            return (!state.stopped, state.started)
        }
        guard first else { return }
        shutdown(fd, Int32(SHUT_RDWR))
        if !started { close(fd) }
    }

    private func acceptLoop(_ serve: @escaping @Sendable (Int32) -> Void) {
        defer { close(fd) }
        while true {
            let client = accept(fd, nil, nil)
            if state.withLock({ $0.stopped }) {
                if client >= 0 { close(client) }
                return
            }
            if client >= 0 { Thread.detachNewThread { serve(client) } }
        }
    }
}
