import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// A `serve` that cannot listen says so as a serve error, with its address and why.
@Suite("ServeBind")
struct ServeBindTests {
    @Test("binding a port in use is a serve error: listen-failed, address in use", arguments: ["library", "cli"])
    func portInUse(via: String) async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            if via == "library" {
                let error = try await #require(throws: OfflineAgentError.self) {
                    _ = try await LocalServer(configuration: .init(root: f.root.path, port: port, deviceID: "d")).start()
                }
                #expect(error.code == .serve && error.cause == .listenFailed)
                #expect(error.reason == "cannot serve on 127.0.0.1:\(port): address in use")
                #expect("\(error)".hasPrefix("serve: "))
            } else {
                let result = try await CLI.run(["serve", "--root", f.root.path, "--port", String(port), "--device-id", "d"])
                #expect(result.status == 1)
                #expect(result.stderr == "offline-agent: serve: cannot serve on 127.0.0.1:\(port): address in use\n")
            }
            // The running server is untouched.
            let response = try await LocalHTTP.request(port: port, "/mall/index.html")
            #expect(response.status == 200)
        }
    }

    @Test("invalid hostile-client settings are usage errors that say which", arguments: [
        (["--max-connections", "0"], "offline-agent: usage: the connection cap must be at least 1 (got 0)\n"),
        (["--header-timeout", "0"], "offline-agent: usage: --header-timeout and --idle-timeout must be positive numbers of seconds, at most 86400\n"),
        (["--idle-timeout=-1"], "offline-agent: usage: --header-timeout and --idle-timeout must be positive numbers of seconds, at most 86400\n"),
        (["--idle-timeout", "1e300"], "offline-agent: usage: --header-timeout and --idle-timeout must be positive numbers of seconds, at most 86400\n"),
        (["--header-timeout", "nan"], "offline-agent: usage: --header-timeout and --idle-timeout must be positive numbers of seconds, at most 86400\n"),
    ])
    func invalidSettings(arguments: [String], message: String) async throws {
        let f = try LocalServerTests.mall()
        let result = try await CLI.run(["serve", "--root", f.root.path, "--port", "0", "--device-id", "d"] + arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(result.stderr == message)
        #expect(!result.stdout.contains("listening"))
    }
}
