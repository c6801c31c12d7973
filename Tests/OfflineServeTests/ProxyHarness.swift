import AsyncHTTPClient
#if canImport(Glibc)
import Glibc
#endif
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
import Testing

/// A front that forwards every request whose `Host` names a mirror of an allowed origin
/// (`serve` itself, or `OriginProxy` behind a bare server: `Forwarder`), plus an upstream
/// "origin" that echoes what it received and streams bodies of any size. Test-only.
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

    /// What forwards in a front: `serve` (its mirror route decides, `OriginProxy` forwards).
    enum Forwarder: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case serve
        var testDescription: String { rawValue }
    }

    /// A front on 127.0.0.1:0 forwarding requests on the mirror of any of `origins`.
    struct Front: Sendable {
        let port: Int
        let metrics: LocalServerMetrics
        /// `.task` fronts are `OriginProxy` alone: no `X-Offline-Source`, which `serve`'s mirror route adds.
        let forwarder: Forwarder

        /// The `Host` header a page on `origin`'s mirror sends.
        func authority(_ origin: MirrorOrigin) -> String { "\(origin.mirrorHost):\(port)" }
        /// `http://<mirror host>:<port>`.
        func base(_ origin: MirrorOrigin) -> String { origin.mirrorBase(servePort: port) }
    }

    /// The proxy's timeouts when a test does not test them: bounds on a hang, not speeds.
    static let patient = OriginProxy.Configuration(connectTimeout: .seconds(60), readTimeout: .seconds(120))

    /// Runs `body` with a front forwarding every request on the mirror of one of `origins`
    /// (403 for any other name) through `forwarder`. With `.serve`, the front is `serve`
    /// over a store whose one app whitelists a path on each origin no test requests, so
    /// the package serves nothing and every request is forwarded.
    static func withFront<T: Sendable>(
        origins: [MirrorOrigin], configuration: OriginProxy.Configuration = patient, via forwarder: Forwarder = .serve,
        _ body: @Sendable (Front) async throws -> T
    ) async throws -> T {
        let front: Front
        let stop: @Sendable () async -> Void
        switch forwarder {
        case .serve:
            let fixture = LocalStoreFixture()
            try fixture.add("proxied", version: "1.0.0", fixture: nil, whitelist: origins.map { "\($0.origin)/never-requested/" })
            var settings = LocalServer.Configuration(root: fixture.root.path, port: 0, deviceID: "device")
            settings.origins = configuration
            let server = try await LocalServer(configuration: settings, logger: quietLogger).start()
            front = Front(port: server.port, metrics: server.metrics, forwarder: forwarder)
            stop = { await server.stop(); _ = fixture }
        }
        do {
            let result = try await body(front)
            await stop()
            return result
        } catch {
            await stop()
            throw error
        }
    }

    /// Runs `body` with a loopback port that refuses connections: bound but never
    /// listening (a connection gets a reset), and held for the whole of `body`, so no
    /// other test's server can take the port meanwhile (a port closed and reused would
    /// have something else answer).
    static func withRefusingPort<T>(_ body: (Int) async throws -> T) async throws -> T {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound else { throw POSIXError(.EADDRNOTAVAIL) }
        return try await body(Int(UInt16(bigEndian: address.sin_port)))
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

    // MARK: Progress, for the streaming tests

    /// Byte counts by key, shared by the in-process origin, client and test.
    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var counts: [String: Int] = [:]
        private var released: Set<String> = []
        func add(_ key: String, _ n: Int) { lock.withLock { counts[key, default: 0] += n } }
        func count(_ key: String) -> Int { lock.withLock { counts[key] ?? 0 } }
        func release(_ key: String) { lock.withLock { _ = released.insert(key) } }
        func isReleased(_ key: String) -> Bool { lock.withLock { released.contains(key) } }
    }
    static let tally = Tally()

    /// Waits (at most 120 s) until `key`'s count reaches `atLeast`.
    static func waitFor(_ key: String, atLeast: Int) async throws {
        for _ in 0..<12000 where tally.count(key) < atLeast { try await Task.sleep(for: .milliseconds(10)) }
    }

    /// `key`'s count once it stops growing for 500 ms or reaches `limit` (at most 30 s):
    /// how far a writer got against a reader that stopped.
    static func settled(_ key: String, limit: Int) async throws -> Int {
        var last = -1, still = 0
        for _ in 0..<300 {
            let now = tally.count(key)
            if now >= limit { return now }
            if now == last { still += 1 } else { still = 0 }
            if still >= 5 { return now }
            last = now
            try await Task.sleep(for: .milliseconds(100))
        }
        return tally.count(key)
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
    /// answers what it saw (with `?hold=KEY`: counts what it read under KEY and stops
    /// reading after 1 MiB until the test releases KEY); `/download?bytes=N[&chunked=1][&track=KEY]`
    /// streams `pattern` bytes (counting what it wrote under KEY);
    /// `/status?code=N` answers N.
    static func startOrigin() async throws -> BackgroundService {
        try await startServer { request in
            let path = request.uri.path
            if path.hasPrefix("/download") {
                let query = request.uri.queryParameters
                let count = Int(query.get("bytes") ?? "0") ?? 0
                let chunked = query.get("chunked") == "1"
                let track = query.get("track")
                var headers = HTTPFields()
                headers[.contentType] = "application/octet-stream"
                let body = ResponseBody(contentLength: chunked ? nil : count) { writer in
                    var sent = 0
                    while sent < count {
                        let n = Swift.min(65536, count - sent)
                        try await writer.write(ByteBuffer(bytes: pattern(offset: sent, count: n)))
                        sent += n
                        if let track { tally.add(track, n) }
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
            let hold = request.uri.queryParameters.get("hold").map { String($0) }
            for try await chunk in request.body {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                length += chunk.readableBytes
                if let hold {
                    tally.add(hold, chunk.readableBytes)
                    // Held until the test releases it (at most 300 s, the client's timeout): a
                    // shorter hold ran out on a loaded machine and let the writer finish.
                    for _ in 0..<30000 where length >= 1 << 20 && !tally.isReleased(hold) {
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
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
        // Bounds on a hang, not speeds: on a loaded 2-core machine a loopback connect has
        // taken over 5 s, and a stalled 100 MB upload sits idle for tens of seconds.
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(60), read: .seconds(120)))
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
        /// Counts the bytes handed to the client under this key.
        var track: String? = nil
        struct AsyncIterator: AsyncIteratorProtocol {
            let count: Int
            let track: String?
            var sent = 0
            mutating func next() async -> ByteBuffer? {
                guard sent < count else { return nil }
                let n = Swift.min(65536, count - sent)
                defer { sent += n }
                if let track { ProxyHarness.tally.add(track, n) }
                return ByteBuffer(bytes: ProxyHarness.pattern(offset: sent, count: n))
            }
        }
        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(count: count, track: track) }
    }
}
