import Foundation
@testable import OfflineServer
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Connections that send nothing, or stop mid-request, are closed after the idle timeout:
/// held for ever, a thousand of them took every file descriptor of a server with the
/// usual limit of 1024, and no device got a manifest.
@Suite("offline-server: idle connections")
struct ServerIdleConnectionTests {
    typealias C = FleetReportClient

    /// Reads until the server closes the connection; false when it is still open when the
    /// socket's receive timeout runs out.
    static func closedByServer(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { continue }
            if n < 0 && errno == EINTR { continue }
            // 0: closed; ECONNRESET: closed hard; EAGAIN: the receive timeout ran out first.
            return n == 0 || errno == ECONNRESET
        }
    }

    @Test("a silent connection, a request head cut short, and a body cut short are closed after the idle timeout; the server still answers")
    func idleConnectionsAreClosed() async throws {
        let directory = try PublishFixtures.temporaryDirectory("idle")
        defer { PublishFixtures.cleanUp(directory) }
        try C.publishFleet(directory)
        var configuration = ReferenceServer.Configuration(directory: directory, port: 0, reportsDatabase: directory + "/reports.sqlite")
        configuration.idleTimeout = .seconds(1)
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let port = server.port

        let partial: [String: String] = [
            "silent": "",
            "head cut short": "GET /fleet/manifest.json HTTP/1.1\r\nHost: x\r\n",
            "body cut short": "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"events\":[",
            "idle after a request": "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        ]
        // Blocking socket calls, on a thread of their own: on the cooperative pool (two threads
        // on two cores) they would stall every other test's server and timer while they wait.
        let outcomes = try await LocalHTTP.onThread { () -> [(name: String, sent: Bool, closed: Bool)] in
            // Opened together: the timeout closes each on its own, whatever the others do.
            var sockets: [(name: String, fd: Int32, sent: Bool)] = []
            defer { for socket in sockets { close(socket.fd) } }
            for (name, bytes) in partial.sorted(by: { $0.key < $1.key }) {
                // A bounded wait far above the 1 s timeout, so only a connection never closed fails.
                let fd = try LoopbackSocket.connect(port: port, timeout: 60)
                sockets.append((name, fd, LoopbackSocket.sendAll(fd, Array(bytes.utf8))))
            }
            return sockets.map { ($0.name, $0.sent, Self.closedByServer($0.fd)) }
        }
        for outcome in outcomes {
            #expect(outcome.sent, "\(outcome.name)")
            #expect(outcome.closed, "\(outcome.name): still open after 60 s")
        }
        #expect(try await PublishHTTP.fetch(server.baseURL + "/metrics").status == 200)
    }
}
