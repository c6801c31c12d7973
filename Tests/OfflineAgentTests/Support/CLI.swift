import Foundation
import Testing

/// Runs the built `offline-agent` executable (tests of exit codes, JSON and crashes
/// need a real process).
enum CLI {
    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["OFFLINE_AGENT_BIN"] { return path }
        for dir in [".build/debug", ".build/x86_64-unknown-linux-gnu/debug", ".build/release"] {
            let path = "\(Repo.root)/\(dir)/offline-agent"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return "\(Repo.root)/.build/debug/offline-agent"
    }

    struct Result {
        var status: Int32
        var signaled: Bool
        var stdout: String
        var stderr: String
    }

    /// Runs the CLI with `arguments` and extra environment, waiting for it to end.
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> Result {
        let process = try start(arguments, environment: environment)
        return await finish(process)
    }

    final class Running: @unchecked Sendable {
        let process: Process
        let out = Pipe()
        let err = Pipe()
        init(process: Process) { self.process = process }
    }

    static func start(_ arguments: [String], environment: [String: String] = [:]) throws -> Running {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
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
    static func finish(_ running: Running) async -> Result {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: finishBlocking(running)) }
        }
    }

    /// `run` for code already on a thread of its own (`LocalHTTP.onThread`) or not async.
    static func runBlocking(_ arguments: [String], environment: [String: String] = [:]) throws -> Result {
        finishBlocking(try start(arguments, environment: environment))
    }

    static func finishBlocking(_ running: Running) -> Result {
        // A thread of its own, not Dispatch: blocking a global queue can starve in-process servers.
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.data = running.err.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }
        let out = running.out.fileHandleForReading.readDataToEndOfFile()
        running.process.waitUntilExit()
        done.wait()
        return Result(
            status: running.process.terminationStatus, signaled: running.process.terminationReason == .uncaughtSignal,
            stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: box.data, as: UTF8.self))
    }

    private final class Box: @unchecked Sendable { var data = Data() }

    static func json(_ text: String) -> [String: Any]? {
        guard let line = text.split(separator: "\n").last else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }
}
