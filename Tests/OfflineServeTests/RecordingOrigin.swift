import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// A raw HTTP/1.1 origin on 127.0.0.1 (port 0) that records exactly the bytes each
/// connection sent it, and whether the connection ended. It answers `200` only to a
/// request it received whole (its `Content-Length`, or a chunked body up to its last
/// chunk and trailer section), so a request that is not whole is never answered: the
/// origin reads on until the peer closes. Test-only.
final class RecordingOrigin: @unchecked Sendable {
    /// What one connection sent.
    struct Connection: Sendable {
        var bytes: [UInt8] = []
        /// The peer closed (or reset) the connection.
        var closed = false
        /// A whole request arrived (and was answered).
        var complete = false

        var text: String { String(decoding: bytes, as: UTF8.self) }
    }

    let port: Int
    private let listener: LoopbackListener
    private let condition = NSCondition()
    private var connections: [Connection] = []

    init() throws {
        listener = try LoopbackListener()
        port = listener.port
        listener.start { [self] fd in serve(fd) }
    }

    func stop() { listener.stop() }

    deinit { stop() }

    /// Every connection so far.
    var recorded: [Connection] {
        condition.lock()
        defer { condition.unlock() }
        return connections
    }

    /// Waits (blocking the calling thread, at most `timeout` seconds) until `done` holds for
    /// the connections so far; false when it never did. Async code calls it on a thread of
    /// its own (`LocalHTTP.onThread`): the server that closes the connections needs the pool.
    func wait(timeout: TimeInterval = 300, until done: ([Connection]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !done(connections) {
            guard condition.wait(until: deadline) else { return done(connections) }
        }
        return true
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        condition.lock()
        let index = connections.count
        connections.append(Connection())
        condition.broadcast()
        condition.unlock()
        // A bound on a hang, not a speed: the connection is recorded as it is then.
        var time = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            condition.lock()
            if n > 0 { connections[index].bytes += chunk[..<n] }
            if n <= 0 { connections[index].closed = true }
            let answer = n > 0 && !connections[index].complete && Self.isWhole(connections[index].bytes)
            if answer { connections[index].complete = true }
            condition.broadcast()
            condition.unlock()
            guard n > 0 else { return }
            if answer { _ = LoopbackSocket.sendAll(fd, Array("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ncomplete".utf8)) }
        }
    }

    /// Whether `bytes` hold a whole request: a head and the whole body it announces.
    static func isWhole(_ bytes: [UInt8]) -> Bool {
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return false }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self).lowercased()
        let body = Array(bytes[end.upperBound...])
        if head.contains("\r\ntransfer-encoding: chunked") { return isWholeChunked(body) }
        let length = head.components(separatedBy: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        return body.count >= length
    }

    /// Whether `body` is a chunked body up to its last chunk and the empty line after the
    /// trailer section.
    static func isWholeChunked(_ body: [UInt8]) -> Bool {
        let crlf: [UInt8] = [13, 10]
        var rest = body[...]
        while let line = rest.firstRange(of: crlf) {
            let sizeText = String(decoding: rest[..<line.lowerBound], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size >= 0 else { return false }
            rest = rest[line.upperBound...]
            if size == 0 {
                // Trailer fields, then an empty line.
                while let field = rest.firstRange(of: crlf) {
                    if field.lowerBound == rest.startIndex { return true }
                    rest = rest[field.upperBound...]
                }
                return false
            }
            guard rest.count >= size + 2 else { return false }
            rest = rest.dropFirst(size + 2)
        }
        return false
    }
}
