import NIOCore
import OfflineAgent
import Synchronization

/// The idle connections to origins of one event loop, kept for the next request to the
/// same origin, as a browser or nginx's `upstream keepalive` keeps them.
///
/// Used only on its own loop (each page connection forwards on the loop that reads it,
/// and its origin connection lives there too), so it needs no lock. A connection waits
/// at most `idleTimeout`; at most `maxIdlePerOrigin` wait per origin; one the origin
/// closes while it waits leaves at once.
final class OriginConnectionPool {
    static let idleTimeout = TimeAmount.seconds(60)
    static let maxIdlePerOrigin = 64

    private var idle: [MirrorOrigin: [OriginConnection]] = [:]

    private init() {}

    /// The pool of `eventLoop` (made on first use; it lasts as long as the process).
    static func of(_ eventLoop: any EventLoop) -> OriginConnectionPool {
        eventLoop.preconditionInEventLoop()
        let key = ObjectIdentifier(eventLoop)
        let bound = pools.withLock { pools in
            if let pool = pools[key] { return pool }
            let pool = NIOLoopBound(OriginConnectionPool(), eventLoop: eventLoop)
            pools[key] = pool
            return pool
        }
        return bound.value
    }

    private static let pools = Mutex<[ObjectIdentifier: NIOLoopBound<OriginConnectionPool>]>([:])

    /// An open idle connection to `origin`, taken out of the pool; nil when none waits.
    func take(_ origin: MirrorOrigin) -> OriginConnection? {
        while let connection = idle[origin]?.popLast() {
            connection.idleSince = nil
            if connection.isActive { return connection }
        }
        return nil
    }

    /// Keeps `connection` for the next request to its origin, or closes it when its
    /// origin already has `maxIdlePerOrigin` waiting. It leaves once idle for
    /// `idleTimeout` (the connection's own timer, `OriginConnection.wake(by:)`, so a
    /// busy connection schedules nothing per request) or once its origin closes it.
    func park(_ connection: OriginConnection) {
        let origin = connection.origin
        guard connection.isActive, (idle[origin]?.count ?? 0) < Self.maxIdlePerOrigin else {
            connection.close()
            return
        }
        connection.exchange = nil
        connection.resume()
        connection.pool = self
        let now = NIODeadline.now()
        connection.idleSince = now
        connection.wake(by: now + Self.idleTimeout)
        idle[origin, default: []].append(connection)
    }

    /// Lets go of an idle `connection` that closed or waited too long.
    func remove(_ connection: OriginConnection) {
        connection.idleSince = nil
        guard var waiting = idle[connection.origin], let index = waiting.firstIndex(where: { $0 === connection }) else { return }
        waiting.remove(at: index)
        idle[connection.origin] = waiting.isEmpty ? nil : waiting
    }
}
