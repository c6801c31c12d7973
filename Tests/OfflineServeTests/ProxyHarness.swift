import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import OfflineAgent
import OfflineHTTP
@testable import OfflineServe
import TestSupport

/// Until `serve` routes mirrored hosts, a minimal front server that forwards every
/// request whose `Host` names a mirror of an allowed origin through `OriginProxy`
/// (403 otherwise), plus an upstream "origin" that echoes what it received and streams
/// bodies of any size. Test-only.
enum ProxyHarness {
    /// Answers every request with one closure.
    struct ClosureResponder: HTTPResponder {
        typealias Context = BasicRequestContext
        let handle: @Sendable (Request) async throws -> Response
        func respond(to request: Request, context: Context) async throws -> Response { try await handle(request) }
    }

    static var quietLogger: Logger {
        var logger = Logger(label: "proxy-tests")
        logger.logLevel = .critical
        return logger
    }

    /// Starts a Hummingbird server on 127.0.0.1:0 answering with `handle`.
    static func startServer(_ handle: @escaping @Sendable (Request) async throws -> Response) async throws -> BackgroundService {
        try await ServiceRunner.start(logger: quietLogger) { onListening in
            Application(
                responder: ClosureResponder(handle: handle),
                configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in await onListening("127.0.0.1", channel.localAddress?.port ?? 0) },
                logger: quietLogger)
        }
    }

    /// A front on 127.0.0.1:0 forwarding requests on the mirror of any of `origins`.
    struct Front: Sendable {
        let service: BackgroundService
        let proxy: OriginProxy
        let metrics: LocalServerMetrics
        var port: Int { service.port }

        /// The `Host` header a page on `origin`'s mirror sends.
        func authority(_ origin: MirrorOrigin) -> String { "\(origin.mirrorHost):\(port)" }
        /// `http://<mirror host>:<port>`.
        func base(_ origin: MirrorOrigin) -> String { origin.mirrorBase(servePort: port) }
    }

    static func withFront<T: Sendable>(
        origins: [MirrorOrigin], configuration: OriginProxy.Configuration = .init(),
        _ body: @Sendable (Front) async throws -> T
    ) async throws -> T {
        let metrics = LocalServerMetrics()
        let proxy = OriginProxy(configuration: configuration, metrics: metrics)
        let allowed = Set(origins)
        let port = PortBox()
        let service = try await startServer { request in
            let host = request.head.authority.map { String($0.split(separator: ":").first ?? "") } ?? ""
            guard let origin = MirrorOrigin(mirrorHost: host), allowed.contains(origin) else {
                return Response(status: .forbidden, body: .init(byteBuffer: ByteBuffer(string: "not mirrored\n")))
            }
            return await proxy.forward(request, to: origin, servePort: port.value, isMirrored: { allowed.contains($0) })
        }
        port.value = service.port
        let front = Front(service: service, proxy: proxy, metrics: metrics)
        do {
            let result = try await body(front)
            await service.stop()
            await proxy.shutdown()
            return result
        } catch {
            await service.stop()
            await proxy.shutdown()
            throw error
        }
    }

    /// The server's port, known only once it listens.
    final class PortBox: @unchecked Sendable {
        private let lock = NSLock()
        private var _value = 0
        var value: Int {
            get { lock.withLock { _value } }
            set { lock.withLock { _value = newValue } }
        }
    }

    // MARK: The upstream origin

    /// What `/echo` received, as the echo reports it.
    struct Echo: Sendable {
        var method = ""
        var target = ""
        var host = ""
        var bodyLength = -1
        var bodySHA256 = ""
        /// Every header line but `Host`, in order, names lowercased.
        var headers: [(String, String)] = []

        func values(_ name: String) -> [String] { headers.filter { $0.0 == name.lowercased() }.map(\.1) }

        init(parsing text: String) {
            for line in text.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let key = String(line[..<colon]), value = String(line[line.index(colon, offsetBy: 2)...])
                switch key {
                case "method": method = value
                case "target": target = value
                case "host": host = value
                case "body-length": bodyLength = Int(value) ?? -2
                case "body-sha256": bodySHA256 = value
                case "header":
                    if let sep = value.firstIndex(of: ":") {
                        headers.append((String(value[..<sep]).lowercased(), String(value[value.index(sep, offsetBy: 2)...])))
                    }
                default: break
                }
            }
        }
    }

    /// The upstream: `/echo…` (any method) streams the request body through SHA-256 and
    /// answers what it saw; `/download?bytes=N[&chunked=1]` streams `pattern` bytes;
    /// `/status?code=N` answers N.
    static func startOrigin() async throws -> BackgroundService {
        try await startServer { request in
            let path = request.uri.path
            if path.hasPrefix("/download") {
                let query = request.uri.queryParameters
                let count = Int(query.get("bytes") ?? "0") ?? 0
                let chunked = query.get("chunked") == "1"
                var headers = HTTPFields()
                headers[.contentType] = "application/octet-stream"
                let body = ResponseBody(contentLength: chunked ? nil : count) { writer in
                    var sent = 0
                    while sent < count {
                        let n = Swift.min(65536, count - sent)
                        try await writer.write(ByteBuffer(bytes: pattern(offset: sent, count: n)))
                        sent += n
                    }
                    try await writer.finish(nil)
                }
                return Response(status: .ok, headers: headers, body: body)
            }
            if path.hasPrefix("/status") {
                let code = Int(request.uri.queryParameters.get("code") ?? "200") ?? 200
                return Response(status: .init(code: code), body: .init(byteBuffer: ByteBuffer(string: "status \(code)\n")))
            }
            var hasher = SHA256()
            var length = 0
            for try await chunk in request.body {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                length += chunk.readableBytes
            }
            var text = "method: \(request.method.rawValue)\ntarget: \(request.head.path ?? "")\nhost: \(request.head.authority ?? "")\n"
            text += "body-length: \(length)\nbody-sha256: \(hex(hasher.finalize()))\n"
            for field in request.headers { text += "header: \(field.name.rawName): \(field.value)\n" }
            var headers = HTTPFields()
            headers[.contentType] = "text/plain"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
        }
    }

    /// The bytes at `offset ..< offset + count` of an endless deterministic stream: a
    /// table of 65 521 bytes (a prime, so no chunk boundary lines up with its period)
    /// repeated, sliced rather than computed (100 MB in a debug build).
    static func pattern(offset: Int, count: Int) -> [UInt8] {
        precondition(count <= 65536)
        let start = offset % patternPeriod
        return Array(patternTable[start..<start + count])
    }

    static let patternPeriod = 65521
    private static let patternTable: [UInt8] = (0..<(65521 + 65536)).map { i in
        let j = i % 65521
        return UInt8(truncatingIfNeeded: j &* 31 &+ j / 251)
    }

    /// SHA-256 of the first `count` bytes of `pattern`.
    static func patternSHA256(count: Int) -> String {
        var hasher = SHA256()
        var done = 0
        while done < count {
            let n = min(65536, count - done)
            hasher.update(data: pattern(offset: done, count: n))
            done += n
        }
        return hex(hasher.finalize())
    }

    static func hex(_ digest: some Sequence<UInt8>) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }

    // MARK: The client

    /// A client that follows no redirects and decompresses nothing, as a page's fetch
    /// in `redirect: "manual"` mode would see the answer.
    static func withClient<T: Sendable>(_ body: @Sendable (HTTPClient) async throws -> T) async throws -> T {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5), read: .seconds(30)))
        configuration.httpVersion = .http1Only
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        do {
            let result = try await body(client)
            try await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// A request to the front on `origin`'s mirror (the `Host` header names the mirror).
    static func request(_ front: Front, _ origin: MirrorOrigin, _ target: String, method: HTTPMethod = .GET,
                        headers: [(String, String)] = []) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(front.port)\(target)")
        request.method = method
        request.headers.add(name: "Host", value: front.authority(origin))
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        return request
    }

    /// Reads a whole (small) body as text.
    static func text(_ response: HTTPClientResponse) async throws -> String {
        var buffer = try await response.body.collect(upTo: 16 << 20)
        return buffer.readString(length: buffer.readableBytes) ?? ""
    }

    /// Streams a body through SHA-256: its length and hash.
    static func hash(_ response: HTTPClientResponse) async throws -> (length: Int, sha256: String) {
        var hasher = SHA256()
        var length = 0
        for try await chunk in response.body {
            chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            length += chunk.readableBytes
        }
        return (length, hex(hasher.finalize()))
    }

    /// `count` bytes of `pattern` as an async sequence of 64 KiB buffers (never held whole).
    struct PatternBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let count: Int
        struct AsyncIterator: AsyncIteratorProtocol {
            let count: Int
            var sent = 0
            mutating func next() async -> ByteBuffer? {
                guard sent < count else { return nil }
                let n = Swift.min(65536, count - sent)
                defer { sent += n }
                return ByteBuffer(bytes: ProxyHarness.pattern(offset: sent, count: n))
            }
        }
        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(count: count) }
    }

    /// The process's peak resident set since the last `resetPeakMemory()`, in bytes.
    static func peakMemory() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }) else { return 0 }
        return (Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0) * 1024
    }

    /// Resets the peak (`VmHWM`) to the current resident set (Linux: `5` to `clear_refs`).
    static func resetPeakMemory() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    static func residentMemory() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return (Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0) * 1024
    }
}
