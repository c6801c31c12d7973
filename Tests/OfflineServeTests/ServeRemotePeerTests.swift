import Foundation
import OfflineServe
import Testing
@testable import OfflineAgent
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 39, row 5: with `--allow-remote`, who may do what is decided by the connection's
/// peer (its socket address), never by a `Host` header a LAN client writes at will. A
/// remote peer reads packages; the lifecycle control, `/metrics` and the mirror hosts
/// (a way into the whitelisted origins) answer this machine's own clients only.
@Suite("serve: remote peers", .serialized)
struct ServeRemotePeerTests {
    /// One of this machine's own IPv4 addresses that is not loopback: a client bound to
    /// nothing that connects to it is seen by the server as that (non-loopback) peer.
    static let remoteAddress: String? = {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var next = list
        while let entry = next {
            defer { next = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET) else { continue }
            let v4 = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            guard UInt32(bigEndian: v4.s_addr) >> 24 != 127 else { continue }
            var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            var copy = v4
            guard inet_ntop(AF_INET, &copy, &text, socklen_t(text.count)) != nil else { continue }
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return nil
    }()

    @Test(
        "a LAN peer with a loopback Host and a page's Referer reaches neither the lifecycle, /metrics, launches nor the origins; it reads packages",
        .enabled(if: remoteAddress != nil, "this machine has no non-loopback IPv4 address"))
    func remotePeer() async throws {
        let remote = try #require(Self.remoteAddress)
        let f = try ServeEdgeTests.trialStore()
        let server = try await LocalServer(
            configuration: .init(root: f.root.path, host: "0.0.0.0", port: 0, deviceID: "d", allowRemote: true)).start()
        do {
            try await Self.check(server, f: f, remote: remote)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    private static func check(_ server: RunningLocalServer, f: LocalStoreFixture, remote: String) async throws {
        let port = server.port
        let mirror = "h5.example.invalid.localhost:\(port)", plain = "127.0.0.1:\(port)"
        let page = [("Origin", "http://\(mirror)"), ("Referer", "http://\(mirror)/mall/index.html")]
        func fromLAN(_ target: String, method: String = "GET", host: String, headers: [(String, String)] = []) async throws -> LocalHTTP.Response {
            try await LocalHTTP.request(port: port, target, method: method, headers: headers, host: host, address: remote)
        }
        // What it may: the packages, and /open's answer (which counts no launch for it).
        let file = try await fromLAN("/mall/index.html", host: "\(remote):\(port)")
        #expect(file.status == 200, "\(file.status) \(file.text)")
        let open = try await fromLAN(ServeEdgeTests.openTarget, host: plain)
        #expect(open.status == 302)
        // What it may not, whatever Host, Origin and Referer it writes.
        for action in ["mark-bad", "mark-good"] {
            for host in [mirror, plain] {
                let answer = try await fromLAN(
                    "/.offline-agent/\(action)?app=mall&version=2.0.0", method: "POST", host: host,
                    headers: host == mirror ? page : [("Referer", "http://\(plain)/mall/index.html")])
                #expect(answer.status == 403, "\(action) \(host): \(answer.status) \(answer.text)")
            }
        }
        #expect(try await fromLAN("/metrics", host: plain).status == 403)
        // A mirror host would forward to the origin: no proxy into whitelisted origins.
        let proxied = try await fromLAN("/api/x", host: mirror)
        #expect(proxied.status == 403 && proxied.header("x-offline-source") == nil, "\(proxied.status)")
        let upgrade = try await fromLAN(
            "/socket", host: mirror,
            headers: [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")])
        #expect(upgrade.status == 403, "\(upgrade.status)")
        var status = Lifecycle(store: f.store).status("mall")
        #expect(status.state == .trial && status.launches == 0 && status.badVersions.isEmpty, "\(status)")

        // The same requests from this machine still work.
        let local = try await LocalHTTP.request(port: port, "/.offline-agent/mark-good?app=mall&version=2.0.0", method: "POST", headers: page, host: mirror)
        #expect(local.status == 200, "\(local.text)")
        status = Lifecycle(store: f.store).status("mall")
        #expect(status.state == .good)
    }
}
