import OfflineAgent
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP server on 127.0.0.1 (port 0) whose answers are byte-level scripts: a status
/// line trickled one byte at a time, headers and then silence, a request held until
/// other connections arrive. It counts simultaneous connections, so a test can prove
/// concurrency without measuring time.
package final class TrickleServer: @unchecked Sendable {
    package enum Step: Sendable {
        /// Send these bytes at once.
        case send([UInt8])
        /// Send these bytes `chunk` at a time, pausing between pieces.
        case trickle([UInt8], chunk: Int, pause: Double)
        /// Say nothing for a while (the connection stays open).
        case sleep(Double)
        /// Wait until this many requests have been in flight at once (now or before), or
        /// `timeout` seconds pass.
        case waitForPeers(Int, timeout: Double)
    }

    /// The request's target (path and query) → what to do with the connection.
    package typealias Handler = @Sendable (_ target: String) -> [Step]

    package let port: Int
    package var baseURL: String { "http://127.0.0.1:\(port)" }
    private let listener: LoopbackListener
    private let handler: Handler
    private struct State {
        var inFlight = 0
        var peak = 0
        var targets: [String] = []
        var stopped = false
    }
    private let state = Mutex(State())

    /// The most requests in flight at the same time (read, not yet answered: a client
    /// cannot start its next request before the answer, so sequential clients count 1).
    package var maxConcurrent: Int { state.withLock { $0.peak } }
    /// Request targets seen, in order.
    package var requests: [String] { state.withLock { $0.targets } }

    package init(_ handler: @escaping Handler) throws {
        self.handler = handler
        listener = try LoopbackListener()
        port = listener.port
        listener.start { [self] client in
            serve(client)
            close(client)
        }
    }

    /// A listening socket on 127.0.0.1 that never accepts; returns it and its port.
    package static func listen(backlog: Int32) throws -> (Int32, Int) {
        try LoopbackSocket.listen(backlog: backlog)
    }

    /// A port on 127.0.0.1 where nothing listens: connecting is refused. The port stays
    /// bound (never listening) for the life of the test process, so no server another
    /// test starts meanwhile can take it and answer instead (a freed port can be reused
    /// at once on a busy machine).
    package static func deadPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { close(fd); throw POSIXError(.EADDRINUSE) }
        reservedPorts.withLock { $0.append(fd) }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// The descriptors holding `deadPort`s, open until the process exits.
    private static let reservedPorts = Mutex<[Int32]>([])

    /// Non-blocking connections to `port`, for filling a listener's accept queue.
    package static func connectAsync(to port: Int) -> Int32 {
        LoopbackSocket.connectNonBlocking(port: port)
    }

    package func stop() { listener.stop() }

    deinit { stop() }

    private func serve(_ fd: Int32) {
        guard let target = readTarget(fd) else { return }
        state.withLock { state in
            state.targets.append(target)
            state.inFlight += 1
            state.peak = max(state.peak, state.inFlight)
        }
        var answering = false
        defer { if !answering { state.withLock { $0.inFlight -= 1 } } }
        for step in handler(target) {
            switch step {
            case .send, .trickle:
                // Counted as answered before the first byte leaves.
                if !answering {
                    answering = true
                    state.withLock { $0.inFlight -= 1 }
                }
            case .sleep, .waitForPeers:
                break
            }
            switch step {
            case .send(let bytes):
                guard LoopbackSocket.sendAll(fd, bytes) else { return }
            case .trickle(let bytes, let chunk, let pause):
                var offset = 0
                while offset < bytes.count {
                    guard LoopbackSocket.sendAll(fd, Array(bytes[offset..<min(offset + chunk, bytes.count)])) else { return }
                    offset += chunk
                    Thread.sleep(forTimeInterval: pause)
                }
            case .sleep(let seconds):
                // Wake early when the client leaves, so a finished test frees its thread.
                var waited = 0.0
                while waited < seconds, !peerClosed(fd) {
                    Thread.sleep(forTimeInterval: 0.05)
                    waited += 0.05
                }
            case .waitForPeers(let count, let timeout):
                var waited = 0.0
                while waited < timeout, state.withLock({ $0.peak }) < count {
                    Thread.sleep(forTimeInterval: 0.02)
                    waited += 0.02
                }
            }
        }
    }

    private func peerClosed(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    /// Reads one request head; returns its target.
    private func readTarget(_ fd: Int32) -> String? {
        var buffer: [UInt8] = []
        let terminator: [UInt8] = [13, 10, 13, 10]
        while buffer.firstRange(of: terminator) == nil {
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
        let line = String(decoding: buffer.prefix { $0 != 13 }, as: UTF8.self).split(separator: " ")
        return line.count >= 2 ? String(line[1]) : nil
    }

    /// An HTTP/1.1 response head with a Content-Length.
    package static func head(_ status: Int = 200, length: Int, headers: [(String, String)] = []) -> [UInt8] {
        var text = "HTTP/1.1 \(status) X\r\nContent-Length: \(length)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        return Array((text + "\r\n").utf8)
    }
}
