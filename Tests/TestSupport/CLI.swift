import OfflineAgent
import Foundation
import Testing

/// Runs the built command-line tools (tests of exit codes, JSON and crashes need a real
/// process): `offline-agent` unless a call names `offline-publish`.
package enum CLI {
    /// The device agent (`OFFLINE_AGENT_BIN` overrides it).
    package static var binary: String {
        if let path = ProcessInfo.processInfo.environment["OFFLINE_AGENT_BIN"] { return path }
        return built("offline-agent")
    }

    /// The publisher toolkit.
    package static var publisher: String { built("offline-publish") }

    /// The reference server.
    package static var server: String { built("offline-server") }

    private static func built(_ name: String) -> String {
        for dir in [".build/debug", ".build/x86_64-unknown-linux-gnu/debug", ".build/release"] {
            let path = "\(Repo.root)/\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return "\(Repo.root)/.build/debug/\(name)"
    }

    package struct Result {
        package var status: Int32
        package var signaled: Bool
        package var stdout: String
        package var stderr: String
    }

    /// Runs the CLI with `arguments` and extra environment, waiting for it to end.
    package static func run(
        _ arguments: [String], environment: [String: String] = [:], executable: String = binary
    ) async throws -> Result {
        await finish(try start(arguments, environment: environment, executable: executable))
    }

    package final class Running: @unchecked Sendable {
        package let process: ChildProcess
        package let out = Pipe()
        package let err = Pipe()
        package init(process: ChildProcess) { self.process = process }
    }

    package static func start(
        _ arguments: [String], environment: [String: String] = [:], executable: String = binary
    ) throws -> Running {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { $1 }
        process.environment = env
        let running = Running(process: process)
        process.standardOutput = running.out
        process.standardError = running.err
        try process.run()
        return running
    }

    /// Waits for the process on a thread of its own: blocking one of the two cooperative
    /// threads of a 2-core machine for a child's whole run would stall every other test.
    package static func finish(_ running: Running) async -> Result {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: finishBlocking(running)) }
        }
    }

    /// SIGTERM, then the rest (its output read, its exit) on a thread of its own: for a
    /// `defer` or `deinit`, which cannot await and must not hold a cooperative thread.
    package static func terminateInBackground(_ running: Running) {
        if running.process.isRunning { running.process.terminate() }
        Thread.detachNewThread { _ = finishBlocking(running) }
    }

    /// `finish`, blocking the calling thread: only for a thread of its own (`finish`,
    /// `LocalHTTP.onThread`), never on the cooperative pool.
    package static func finishBlocking(_ running: Running) -> Result {
        // A thread of its own, not Dispatch: blocking a global queue can starve in-process servers.
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.data = running.err.fileHandleForReading.readAllRetryingInterrupts()
            done.signal()
        }
        let out = running.out.fileHandleForReading.readAllRetryingInterrupts()
        running.process.waitUntilExit()
        done.wait()
        return Result(
            status: running.process.terminationStatus, signaled: running.process.terminationReason == .uncaughtSignal,
            stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: box.data, as: UTF8.self))
    }

    private final class Box: @unchecked Sendable { var data = Data() }

    package static func json(_ text: String) -> [String: Any]? {
        guard let line = text.split(separator: "\n").last else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }
}
