import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Progress as a person sees it: a self-updating line on a real pseudo-terminal (phase,
/// bytes of the total, rate, where a resumed download started, cleared at the end);
/// plain lines every 10 % or 5 s with `--verbose` off a terminal; nothing extra in
/// `--json` or cron output.
@Suite("Sync progress", .serialized)
struct SyncProgressTests {
    /// Runs `offline-agent ARGS` with stdin, stdout and stderr on a new pseudo-terminal
    /// (python3's `pty`), returning everything it wrote there and its exit status.
    static func onTerminal(_ arguments: [String]) async throws -> CLI.Result {
        let script = """
            import os, pty, sys
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.argv[1], sys.argv[1:])
            out = b""
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                out += data
            _, status = os.waitpid(pid, 0)
            sys.stdout.buffer.write(out)
            sys.exit(os.waitstatus_to_exitcode(status))
            """
        return try await CLI.run(["-c", script, CLI.binary] + arguments, executable: "/usr/bin/python3")
    }

    static func sync(_ h: SyncHarness) -> [String] {
        ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString]
    }

    @Test("on a terminal: one redrawn line with bytes, rate and 'resuming from', cleared before the summary")
    func terminalLine() async throws {
        let (h, bytes) = try SyncInterruptionTests.slowHarness()
        // Keep 32 KiB of the package from a run whose connection closed, so the next one
        // resumes (no timing involved: the server cuts the body itself).
        h.origin.override("big.zip") { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.ending = .close(afterBodyBytes: 32 << 10)
            return reply
        }
        #expect(await h.sync().result == .failed)
        h.origin.slow("big.zip", chunk: 2048, pause: 0.02)
        let result = try await Self.onTerminal(Self.sync(h) + ["--force"])
        #expect(bytes.count > 200 << 10)
        #expect(result.status == 0, "\(result.stdout)")
        let screen = result.stdout
        let clear = "\r\u{1B}[K"
        let draws = screen.components(separatedBy: clear).filter { $0.hasPrefix("mall: downloading ") }
        #expect(draws.count >= 3, "the line is redrawn as bytes arrive: \(screen.debugDescription)")
        #expect(draws.contains { $0.contains(" KB of 26") && $0.contains("%)") }, "\(draws)")
        #expect(draws.contains { $0.range(of: #", [0-9.]+ [KM]B/s"#, options: .regularExpression) != nil }, "a rate: \(draws)")
        #expect(draws.filter { $0.contains(", resuming from ") }.count >= 2 && draws.last?.contains(", resuming from ") == true, "\(draws)")
        // Cleared: the summary starts on a clean line, after the clearing sequence.
        #expect(screen.contains("\(clear)mall: updated none -> 2.0.0 via full"), "\(screen.debugDescription)")
        #expect(screen.components(separatedBy: clear).last?.hasPrefix("mall: updated") == true, "\(screen.debugDescription)")
    }

    @Test("--json on a terminal draws nothing: the output is the one JSON object")
    func jsonOnTerminal() async throws {
        let (h, _) = try SyncInterruptionTests.slowHarness()
        h.origin.slow("big.zip", chunk: 32 << 10, pause: 0.05)
        let result = try await Self.onTerminal(Self.sync(h) + ["--json"])
        #expect(result.status == 0)
        let lines = result.stdout.split(whereSeparator: \.isNewline)
        #expect(lines.count == 1 && lines[0].hasPrefix("{"), "\(result.stdout.debugDescription)")
    }

    @Test("--verbose off a terminal: a plain line every 10 % (or 5 s) of a download; without it, only the summary")
    func verbosePlainLines() async throws {
        let (h, _) = try SyncInterruptionTests.slowHarness()
        h.origin.slow("big.zip", chunk: 8 << 10, pause: 0.01)
        let verbose = try await CLI.run(Self.sync(h) + ["--verbose"])
        #expect(verbose.status == 0, "\(verbose.stderr)")
        let lines = verbose.stderr.split(separator: "\n").filter { $0.hasPrefix("mall: downloading") }
        #expect((9...12).contains(lines.count), "\(lines)")
        #expect(lines.last?.contains("(100%)") == true, "\(lines)")
        #expect(!verbose.stderr.contains("\r"))

        let (quiet, _) = try SyncInterruptionTests.slowHarness()
        quiet.origin.slow("big.zip", chunk: 8 << 10, pause: 0.01)
        let plain = try await CLI.run(Self.sync(quiet))
        #expect(plain.stderr.split(separator: "\n").count == 1, "\(plain.stderr)")
    }
}
