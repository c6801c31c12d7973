import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// A real `offline-publish` or `offline-server` process for the race and crash tests:
/// its stderr goes to a file the test can read while it runs, and it can be stopped at
/// a `PublishStep` (`OFFLINE_PUBLISH_PAUSE_AT`) and resumed.
final class PublishProcess: @unchecked Sendable {
    let process = ChildProcess()
    let stdoutPath: String
    let stderrPath: String

    init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], logs: String) throws {
        stdoutPath = "\(logs)/\(UUID().uuidString).out"
        stderrPath = "\(logs)/\(UUID().uuidString).err"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle(forWritingAtPath: stdoutPath)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// The process state letter of /proc/PID/stat (`T`: stopped), nil once reaped.
    var state: Character? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].first { $0 != " " }
    }

    /// Polls `condition` every 20 ms, at most `limit` times (a bound, not a speed
    /// assumption: it only ends a test that would otherwise hang). It sleeps with
    /// `Task.sleep`, so no cooperative thread is held while the child works.
    @discardableResult
    static func poll(limit: Int = 6_000, _ condition: () -> Bool) async -> Bool {
        for _ in 0..<limit {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    /// Waits until the process stopped itself at its pause step (or ended).
    func waitStopped() async -> Bool { await Self.poll { state == "T" || !process.isRunning } && process.isRunning }

    func resume() { kill(pid, SIGCONT) }

    /// Waits for the exit (bounded by the caller's own bounds on the process).
    func wait() async -> (status: Int32, signaled: Bool) {
        await process.exited()
        return (process.terminationStatus, process.terminationReason == .uncaughtSignal)
    }

    /// Kills a process still running at the end of a failed test.
    func stop() {
        if process.isRunning {
            kill(pid, SIGCONT)
            kill(pid, SIGKILL)
            process.waitUntilExit()  // blocking: reaping a SIGKILLed child, a moment
        }
    }
}
