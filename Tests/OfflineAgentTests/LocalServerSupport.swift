import Foundation
import OfflineHTTP
import Testing
@testable import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// A raw HTTP/1.1 client over a loopback socket: no redirects followed, no path
/// normalization, any `Host` (or none) — what the server's edge cases need.
/// Blocking socket work runs on threads of its own, never on the cooperative pool
/// that the in-process server's handlers share.
enum LocalHTTP {
    struct Response: Sendable {
        var status: Int
        /// Header names lowercased.
        var headers: [String: String]
        var body: [UInt8]

        func header(_ name: String) -> String? { headers[name.lowercased()] }
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Sends one request with `Connection: close` and reads the whole response.
    /// `host` nil sends no `Host` header.
    static func request(
        port: Int, _ target: String, method: String = "GET", headers: [(String, String)] = [], host: String? = nil,
        omitHost: Bool = false
    ) async throws -> Response {
        let hostValue = omitHost ? nil : (host ?? "127.0.0.1:\(port)")
        return try await onThread {
            let fd = try connect(port: port)
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
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// A connected TCP socket to 127.0.0.1:`port` with a 30 s receive timeout;
    /// `receiveBuffer` shrinks the receive window (set before connecting).
    static func connect(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket") }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw Failure(description: "connect: \(String(cString: strerror(errno)))")
        }
        return fd
    }

    static func send(_ fd: Int32, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// Reads up to the end of the response head; returns the head and any body bytes read with it.
    static func readHead(_ fd: Int32) throws -> (head: Response, extra: [UInt8]) {
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

    static func parse(_ data: [UInt8]) throws -> Response {
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

/// A store with hand-made versions (fixture files plus extras), no network.
final class LocalStoreFixture: @unchecked Sendable {
    static let whitelist = "https://h5.example.invalid/mall/"
    let root = TemporaryDirectory("serve")
    var store: Store { Store(root: root.path) }

    /// Installs `version` of `app` from the fixture app directory `fixture` (when given)
    /// plus `files`, records it and makes it active.
    func add(
        _ app: String = "mall", version: String, fixture: String? = "1.0.0", files: [String: [UInt8]] = [:],
        whitelist: [String] = [LocalStoreFixture.whitelist], miniVersion: String = "1.0.0", rollout: Int = 100
    ) throws {
        try store.prepare(app)
        let v = Version(version)!
        let dir = store.versionDirectory(app, v)
        if let fixture {
            try FileManager.default.copyItem(atPath: "\(Repo.fixtures)/sample-app/\(fixture)", toPath: dir)
        } else {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        for (name, content) in files {
            let path = "\(dir)/\(name)"
            try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path), withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: path, contents: Data(content)))
        }
        let record = InstalledVersion(
            version: v, packageSha256: String(repeating: "0", count: 64), miniVersion: Version(miniVersion)!,
            whitelist: whitelist, rollout: rollout, installedAt: Date(), via: .full, previousVersion: store.active(app)?.version)
        try store.updateRecord(record, app: app)
        try store.activate(app, v)
    }

    func directory(_ version: String, app: String = "mall") -> String {
        store.versionDirectory(app, Version(version)!)
    }

    func start(deviceID: String = "device", allowRemote: Bool = false) async throws -> RunningLocalServer {
        try await LocalServer(configuration: .init(root: root.path, port: 0, deviceID: deviceID, allowRemote: allowRemote)).start()
    }

    static func fixtureBytes(_ version: String, _ path: String) -> [UInt8] {
        [UInt8](FileManager.default.contents(atPath: "\(Repo.fixtures)/sample-app/\(version)/\(path)")!)
    }
}

/// Deterministic bytes for big-file tests.
func localRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SplitMix64(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { raw in
        var i = 0
        while i + 8 <= count {
            raw.storeBytes(of: generator.next(), toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < count {
            raw[i] = UInt8(truncatingIfNeeded: generator.next())
            i += 1
        }
    }
    return bytes
}

/// Runs `body` with a started server and stops it afterwards, even on failure.
func withLocalServer(
    _ fixture: LocalStoreFixture, deviceID: String = "device", allowRemote: Bool = false,
    _ body: (RunningLocalServer) async throws -> Void
) async throws {
    let server = try await fixture.start(deviceID: deviceID, allowRemote: allowRemote)
    do {
        try await body(server)
    } catch {
        await server.stop()
        throw error
    }
    await server.stop()
}

extension String {
    /// Percent-encodes for use as one query parameter value.
    var localQueryEncoded: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed)!
    }
}
