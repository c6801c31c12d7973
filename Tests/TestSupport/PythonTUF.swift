import Foundation

/// python-tuf 7.0.1, the TUF reference implementation, in the virtual environment
/// `scripts/tuf-venv.sh` makes, running the scripts in `fixtures/tuf/`.
///
/// `OFFLINE_AGENT_TUF_PYTHON` names its python (CI sets it: a broken venv then fails
/// the tests instead of skipping them); otherwise `.build-tuf-venv/bin/python3` under
/// the package root is used when it exists.
package enum PythonTUF {
    package static let python: String = ProcessInfo.processInfo.environment["OFFLINE_AGENT_TUF_PYTHON"]
        ?? "\(Repo.root)/.build-tuf-venv/bin/python3"

    /// Why the interop tests cannot run here, or nil when they can.
    package static var missing: String? {
        if ProcessInfo.processInfo.environment["OFFLINE_AGENT_TUF_PYTHON"] != nil { return nil }
        return FileManager.default.isExecutableFile(atPath: python)
            ? nil : "python-tuf is not installed: run scripts/tuf-venv.sh (CI sets OFFLINE_AGENT_TUF_PYTHON)"
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// Runs `fixtures/tuf/<script>` with `arguments`; returns its stdout, throws with
    /// its stderr when it fails.
    @discardableResult
    package static func run(_ script: String, _ arguments: [String]) async throws -> String {
        let result = try await TestSupport.run(python, ["\(Repo.fixtures)/tuf/\(script)"] + arguments)
        guard result.status == 0 else {
            throw Failure(description: "\(script) \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
        }
        return result.stdout
    }
}
