import OfflineAgent
import Foundation
import Testing

package enum Repo {
    /// The package root, found from this file's location.
    package static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
        }
        fatalError("package root not found")
    }()

    package static var fixtures: String { "\(root)/fixtures" }
}

/// Runs a program to completion and returns its status and output. The waits (the
/// pipes, the exit) run on a thread of their own, not on the cooperative pool.
@discardableResult
package func run(_ executable: String, _ arguments: [String], cwd: String? = nil) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await LocalHTTP.onThread { try runOnThisThread(executable, arguments, cwd: cwd) }
}

/// `run`'s body, blocking the calling thread: for `run`'s own thread, and for the fixture
/// builds in synchronous initialisers (`PackageFixture`: a few `zip -0` of small trees).
package func runOnThisThread(_ executable: String, _ arguments: [String], cwd: String? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/env")
    process.arguments = executable.hasPrefix("/") ? arguments : [executable] + arguments
    if let cwd { process.currentDirectoryURL = URL(fileURLWithPath: cwd) }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    // Read stderr on another thread so a chatty child can't block on a full pipe.
    // A thread of its own, not Dispatch: blocking a global queue can starve in-process servers.
    let box = DataBox()
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        box.data = err.fileHandleForReading.readAllRetryingInterrupts()
        done.signal()
    }
    let stdout = out.fileHandleForReading.readAllRetryingInterrupts()
    process.waitUntilExit()
    done.wait()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: box.data, as: UTF8.self))
}

private final class DataBox: @unchecked Sendable { var data = Data() }
