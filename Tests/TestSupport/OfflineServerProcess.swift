import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// `offline-server` as a process (the reference server the way an operator runs it): started
/// on a port of its choosing (or a given one), stopped gracefully or killed, and restarted
/// with the same arguments, so on the same publish directory and reports database.
package final class OfflineServerProcess: @unchecked Sendable {
    package let process = ChildProcess()
    /// The port it listens on, from its first line of output.
    package let port: Int
    /// The arguments given (without the `--port` and `--log-level` added here).
    package let arguments: [String]
    /// Variables set for it on top of this process's environment.
    package let environment: [String: String]
    package var baseURL: String { "http://127.0.0.1:\(port)" }
    /// `GET /manifest`, the URL devices check.
    package var manifestURL: String { baseURL + "/manifest" }

    /// How long a start may take on a loaded machine before the process is killed and the
    /// start fails: a bound on a hang, not a speed.
    package static let startTimeout: TimeInterval = 300

    /// Starts the built `offline-server` with `arguments`, on `port` (0: one the kernel picks).
    package init(arguments: [String], port: Int = 0, environment: [String: String] = [:]) async throws {
        guard let executable = PublishFixtures.builtExecutable("offline-server") else {
            throw OfflineAgentError(.usage, "offline-server is not built (swift build --build-tests builds it)")
        }
        self.arguments = arguments
        self.environment = environment
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments + ["--port", "\(port)", "--log-level", "warning"]
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The first line says where it listens; a server that dies ends the read with EOF.
        // Read on a thread of its own so a server that hangs before it is bounded, and
        // waited for on another (not on the cooperative pool: a start can take seconds).
        let (timedOut, line) = try await LocalHTTP.onThread { () -> (Bool, String) in
            let line = LineBox()
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                var bytes = Data()
                while true {
                    let byte = stdout.fileHandleForReading.readSomeRetryingInterrupts(limit: 1)
                    if byte.isEmpty || byte == Data("\n".utf8) { break }
                    bytes += byte
                }
                line.text = String(decoding: bytes, as: UTF8.self)
                done.signal()
            }
            let timedOut = done.wait(timeout: .now() + Self.startTimeout) == .timedOut
            return (timedOut, timedOut ? "" : line.text)
        }
        let text = timedOut ? "(no answer in \(Int(Self.startTimeout)) s)" : line
        guard !timedOut, text.hasPrefix("listening on "), let bound = Int(text.split(separator: ":").last ?? "") else {
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            await process.exited()
            throw OfflineAgentError(.serve, "offline-server did not start: '\(text)' (exit \(process.terminationStatus))")
        }
        self.port = bound
    }

    private final class LineBox: @unchecked Sendable { var text = "" }

    /// SIGTERM (a graceful stop) and the wait for the exit, on a thread of its own.
    package func stop() async {
        await signalAndWait(SIGTERM)
    }

    /// SIGKILL (a crash: nothing flushed, no shutdown) and the wait for the exit.
    package func kill() async {
        await signalAndWait(SIGKILL)
    }

    /// `stop()` for a `defer`: SIGTERM without waiting for the exit (the reaper thread
    /// sees it), as nothing after the test needs the server gone; waiting in synchronous
    /// code would hold one of the cooperative pool's threads.
    package func stopInBackground() {
        if process.isRunning { process.terminate() }
    }

    /// A new process with the same arguments (the same directory and database) once this
    /// one has ended; on the same port when `samePort`, else on a new one.
    package func restarted(samePort: Bool = false) async throws -> OfflineServerProcess {
        await stop()
        return try await OfflineServerProcess(arguments: arguments, port: samePort ? port : 0, environment: environment)
    }

    private func signalAndWait(_ signal: Int32) async {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
        await process.exited()
    }
}
