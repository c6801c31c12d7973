import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The raw test servers (`ScriptedServer`, `LoopbackListener`) never answer for a socket
/// that is not theirs: a listener stopped right after it started used to close its
/// descriptor while its accept thread had not yet called `accept`; the next listener,
/// often given the same descriptor number, then had its connections served by the
/// stopped one's script. In the full suite that made the proxy's response-header test
/// get another test's `200 status 200\n` (11 bytes) instead of its own answer.
@Suite("Loopback listener isolation")
struct LoopbackListenerReuseTests {
    /// Answers each connection with one byte and closes it.
    static func listener(answering byte: UInt8) throws -> LoopbackListener {
        let listener = try LoopbackListener()
        listener.start { fd in
            _ = LoopbackSocket.sendAll(fd, [byte])
            close(fd)
        }
        return listener
    }

    @Test("a listener stopped at once never serves the next listener's connections")
    func stoppedListenerKeepsOut() async throws {
        let answers = try await LocalHTTP.onThread { () -> [UInt8] in
            var answers: [UInt8] = []
            for _ in 0..<200 {
                let stopped = try Self.listener(answering: UInt8(ascii: "A"))
                stopped.stop()
                let live = try Self.listener(answering: UInt8(ascii: "B"))
                defer { live.stop() }
                // Several connections: a stale accept loop wins some of them, not all.
                for _ in 0..<3 {
                    let fd = try LoopbackSocket.connect(port: live.port, timeout: 10)
                    var byte: UInt8 = 0
                    let n = recv(fd, &byte, 1, 0)
                    close(fd)
                    answers.append(n == 1 ? byte : 0)
                }
            }
            return answers
        }
        let foreign = answers.filter { $0 != UInt8(ascii: "B") }.count
        #expect(foreign == 0, "\(foreign) of \(answers.count) connections were answered by another listener (or not at all)")
    }
}
