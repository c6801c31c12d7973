import Foundation
import OfflineAgent
import TestSupport

/// `offline-server` as a process on a port of its choosing (the fleet report tests
/// restart it, and the benchmark runs it the same way).
final class FleetServerProcess: @unchecked Sendable {
    let process = Process()
    let port: Int
    var baseURL: String { "http://127.0.0.1:\(port)" }

    init(arguments: [String]) throws {
        guard let executable = PublishFixtures.builtExecutable("offline-server") else {
            throw OfflineAgentError(.usage, "offline-server is not built (swift build --build-tests builds it)")
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments + ["--port", "0", "--log-level", "warning"]
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The first line says where it listens; a server that dies ends the read with EOF.
        var line = Data()
        while true {
            let byte = stdout.fileHandleForReading.readSomeRetryingInterrupts(limit: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line += byte
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("listening on "), let port = Int(text.split(separator: ":").last ?? "") else {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            throw OfflineAgentError(.serve, "offline-server did not start: '\(text)' (exit \(process.terminationStatus))")
        }
        self.port = port
    }

    /// SIGTERM (a graceful stop) and the wait for the exit, on a thread of its own.
    func stop() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                if self.process.isRunning { self.process.terminate() }
                self.process.waitUntilExit()
                done.resume()
            }
        }
    }
}
