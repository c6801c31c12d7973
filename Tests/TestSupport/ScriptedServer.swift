import OfflineAgent
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A deliberately misbehaving HTTP/1.1 server on 127.0.0.1 (port 0) for fault tests:
/// each request is answered by a script that can lie about lengths, stall, cut the
/// body, reset the connection or ignore `Range`.
package final class ScriptedServer: @unchecked Sendable {
    package struct Request: Sendable {
        package var method: String
        package var target: String
        package var headers: [String: String]

        package var path: String { String(target.split(separator: "?", maxSplits: 1).first ?? "") }
        package var query: [String: String] {
            URLComponents(string: "http://x\(target)")?.queryItems?.reduce(into: [:]) { $0[$1.name] = $1.value ?? "" } ?? [:]
        }
        package func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    package struct Reply: Sendable {
        package enum Ending: Sendable {
            /// Send everything and keep the connection usable.
            case complete
            /// Close after this many body bytes.
            case close(afterBodyBytes: Int)
            /// Reset (RST) after this many body bytes.
            case reset(afterBodyBytes: Int)
            /// Send the headers, then go silent for this many seconds.
            case stall(seconds: Double)
            /// Send the body in small pieces with pauses (a slow link).
            case drip(chunk: Int, pause: Double)
            /// Close the connection without answering (a kept connection the server dropped).
            case drop
            /// Send this many body bytes, then hold the connection open without sending
            /// more, until the client closes it or `seconds` pass: a download that stays
            /// under way, with a known part on disk, for as long as a test needs.
            case hold(afterBodyBytes: Int, seconds: Double)
            /// With `Transfer-Encoding: chunked`: send every byte of the body but not the
            /// terminating chunk, then hold as `hold` does: the client has the whole file
            /// and still waits for the body's end.
            case holdBeforeLastChunk(seconds: Double)
        }

        package var status: Int
        package var headers: [(String, String)] = []
        package var body: [UInt8] = []
        package var ending: Ending = .complete
        /// Content-Length to announce; the body's length when nil.
        package var contentLength: Int?

        package init(
            status: Int, headers: [(String, String)] = [], body: [UInt8] = [], ending: Ending = .complete,
            contentLength: Int? = nil
        ) {
            self.status = status
            self.headers = headers
            self.body = body
            self.ending = ending
            self.contentLength = contentLength
        }

        package static func ok(_ body: [UInt8], headers: [(String, String)] = []) -> Reply {
            Reply(status: 200, headers: headers, body: body)
        }

        package static func status(_ code: Int, headers: [(String, String)] = []) -> Reply {
            Reply(status: code, headers: headers, body: Array("status \(code)\n".utf8))
        }
    }

    package typealias Handler = @Sendable (Request) -> Reply

    package let port: Int
    private let listener: LoopbackListener
    private let handler: Handler
    private let state = Mutex((log: [Request](), stopped: false, connections: 0))

    package var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Requests seen so far, in order.
    package var requests: [Request] { state.withLock { $0.log } }

    /// Connections accepted so far.
    package var connections: Int { state.withLock { $0.connections } }

    package init(_ handler: @escaping Handler) throws {
        self.handler = handler
        listener = try LoopbackListener()
        port = listener.port
        listener.start { [self] client in serve(client) }
    }

    /// Stops accepting and ends every stall and hold under way (their connections close);
    /// safe to call more than once.
    package func stop() {
        state.withLock { $0.stopped = true }
        listener.stop()
    }

    deinit { stop() }

    private func serve(_ fd: Int32) {
        state.withLock { $0.connections += 1 }
        var closed = false
        defer { if !closed { close(fd) } }
        var buffer: [UInt8] = []
        while true {
            guard let request = readRequest(fd, &buffer) else { return }
            state.withLock { $0.log.append(request) }
            let reply = handler(request)
            if case .drop = reply.ending { return }
            var head = "HTTP/1.1 \(reply.status) X\r\n"
            var hasLength = false
            var chunked = false
            for (name, value) in reply.headers {
                head += "\(name): \(value)\r\n"
                if name.lowercased() == "content-length" { hasLength = true }
                if name.lowercased() == "transfer-encoding" { chunked = true }
            }
            if !hasLength && !chunked { head += "Content-Length: \(reply.contentLength ?? reply.body.count)\r\n" }
            head += "\r\n"
            guard LoopbackSocket.sendAll(fd, Array(head.utf8)) else { return }
            var body = request.method == "HEAD" ? [] : reply.body
            if chunked {
                var encoded: [UInt8] = []
                var offset = 0
                while offset < body.count {
                    let piece = body[offset..<min(offset + 16384, body.count)]
                    encoded += Array(String(piece.count, radix: 16).utf8) + [13, 10] + piece + [13, 10]
                    offset += piece.count
                }
                body = encoded + Array("0\r\n\r\n".utf8)
            }
            switch reply.ending {
            case .complete:
                guard LoopbackSocket.sendAll(fd, body) else { return }
            case .close(let count):
                _ = LoopbackSocket.sendAll(fd, Array(body.prefix(count)))
                return
            case .reset(let count):
                _ = LoopbackSocket.sendAll(fd, Array(body.prefix(count)))
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                close(fd)
                closed = true
                return
            case .stall(let seconds):
                // Ends early when the client leaves: long stalls hold no thread past their test.
                hold(fd, seconds: seconds)
                return
            case .drip(let chunk, let pause):
                var offset = 0
                while offset < body.count {
                    guard LoopbackSocket.sendAll(fd, Array(body[offset..<min(offset + chunk, body.count)])) else { return }
                    offset += chunk
                    Thread.sleep(forTimeInterval: pause)
                }
            case .drop:
                return
            case .hold(let count, let seconds):
                guard LoopbackSocket.sendAll(fd, Array(body.prefix(count))) else { return }
                hold(fd, seconds: seconds)
                return
            case .holdBeforeLastChunk(let seconds):
                let end = Array("0\r\n\r\n".utf8)
                guard chunked, body.suffix(end.count).elementsEqual(end),
                      LoopbackSocket.sendAll(fd, Array(body.dropLast(end.count))) else { return }
                hold(fd, seconds: seconds)
                return
            }
        }
    }

    /// Keeps the connection open without sending, until the client closes it, `seconds`
    /// pass or the server is stopped.
    private func hold(_ fd: Int32, seconds: Double) {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !state.withLock({ $0.stopped }) {
            var pollfd = Glibc.pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pollfd, 1, 50) > 0 {
                // Readable with nothing to read: the client closed; stop holding.
                var byte: UInt8 = 0
                if recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) <= 0 { return }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> Request? {
        let terminator: [UInt8] = [13, 10, 13, 10]
        while true {
            if let end = buffer.firstRange(of: terminator) {
                let head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                buffer.removeSubrange(..<end.upperBound)
                var lines = head.components(separatedBy: "\r\n")
                let first = lines.removeFirst().split(separator: " ")
                guard first.count >= 2 else { return nil }
                var headers: [String: String] = [:]
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                // A body framed by a length is read past (not kept), so the next request on
                // the connection starts where it should.
                var body = Int(headers["content-length"] ?? "") ?? 0
                while body > 0 {
                    if buffer.isEmpty {
                        var chunk = [UInt8](repeating: 0, count: 4096)
                        let n = recv(fd, &chunk, chunk.count, 0)
                        if n <= 0 { return nil }
                        buffer += chunk[0..<n]
                    }
                    let taken = min(body, buffer.count)
                    buffer.removeFirst(taken)
                    body -= taken
                }
                return Request(method: String(first[0]), target: String(first[1]), headers: headers)
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }
}
