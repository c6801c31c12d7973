import OfflineAgent
import Foundation
import OfflineServe
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A raw HTTP/1.1 client over a loopback socket: no redirects followed, no path
/// normalization, any `Host` (or none) — what the server's edge cases need.
/// Blocking socket work runs on threads of its own, never on the cooperative pool
/// that the in-process server's handlers share.
package enum LocalHTTP {
    package struct Response: Sendable {
        package var status: Int
        /// Header names lowercased.
        package var headers: [String: String]
        package var body: [UInt8]

        package func header(_ name: String) -> String? { headers[name.lowercased()] }
        package var text: String { String(decoding: body, as: UTF8.self) }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(description: String) { self.description = description }
    }

    /// Sends one request with `Connection: close` and reads the whole response.
    /// `host` nil sends no `Host` header.
    package static func request(
        port: Int, _ target: String, method: String = "GET", headers: [(String, String)] = [], host: String? = nil,
        omitHost: Bool = false, address: String = "127.0.0.1"
    ) async throws -> Response {
        let hostValue = omitHost ? nil : (host ?? "127.0.0.1:\(port)")
        return try await onThread {
            let fd = try LoopbackSocket.connect(port: port, timeout: 30, address: address)
            defer { close(fd) }
            var text = "\(method) \(target) HTTP/1.1\r\n"
            if let hostValue { text += "Host: \(hostValue)\r\n" }
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += "Connection: close\r\n\r\n"
            try send(fd, Array(text.utf8))
            var data: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = recv(fd, &chunk, chunk.count, 0)
                if n < 0 { throw Failure(description: "recv: \(String(cString: strerror(errno)))") }
                if n == 0 { break }
                data += chunk[0..<n]
            }
            return try parse(data)
        }
    }

    /// Runs blocking work on a thread of its own: not on Dispatch's global queues,
    /// whose few workers (one per core on Linux) also run the cooperative pool that
    /// the in-process server's handlers need.
    package static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// A connected TCP socket to 127.0.0.1:`port` with 30 s send and receive timeouts;
    /// `receiveBuffer` shrinks the receive window (set before connecting).
    package static func connect(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        try LoopbackSocket.connect(port: port, timeout: 30, receiveBuffer: receiveBuffer)
    }

    package static func send(_ fd: Int32, _ bytes: [UInt8]) throws {
        guard LoopbackSocket.sendAll(fd, bytes) else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
    }

    /// Reads up to the end of the response head; returns the head and any body bytes read with it.
    package static func readHead(_ fd: Int32) throws -> (head: Response, extra: [UInt8]) {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = headEnd(data) {
                return (try parse(Array(data[..<end])), Array(data[end...]))
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else { throw Failure(description: "connection closed before the response head") }
            data += chunk[0..<n]
        }
    }

    private static func headEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for i in 0...(data.count - 4) where data[i] == 13 && data[i + 1] == 10 && data[i + 2] == 13 && data[i + 3] == 10 {
            return i + 4
        }
        return nil
    }

    package static func parse(_ data: [UInt8]) throws -> Response {
        guard let end = headEnd(data) else { throw Failure(description: "no response head in \(data.count) bytes") }
        let head = String(decoding: data[..<(end - 4)], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw Failure(description: "bad status line in \(head)")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: status, headers: headers, body: Array(data[end...]))
    }
}
