import Foundation
import Testing

/// A scratch directory removed when the value is dropped.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String
    var url: URL { URL(fileURLWithPath: path) }

    init(_ label: String = "test") {
        let base = FileManager.default.temporaryDirectory.path
        var template = Array("\(base)/offline-agent-\(label)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(cString: template)
    }

    func file(_ name: String) -> String { "\(path)/\(name)" }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

enum Repo {
    /// The package root, found from this file's location.
    static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
        }
        fatalError("package root not found")
    }()

    static var fixtures: String { "\(root)/fixtures" }
}

/// Runs a program to completion and returns its status and output.
@discardableResult
func run(_ executable: String, _ arguments: [String], cwd: String? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
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
        box.data = err.fileHandleForReading.readDataToEndOfFile()
        done.signal()
    }
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    done.wait()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: box.data, as: UTF8.self))
}

private final class DataBox: @unchecked Sendable { var data = Data() }

/// Deterministic pseudo-random bytes (SplitMix64), so fuzz and data tests repeat exactly.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Lists every file and directory under `path` (relative), sorted.
func tree(_ path: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: path) else { return [] }
    return (enumerator.allObjects as? [String] ?? []).sorted()
}
