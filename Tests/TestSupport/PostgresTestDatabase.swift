import Foundation

/// A PostgreSQL database of its own for one test, on the server `.ci/run` and
/// `scripts/test.sh` start (`scripts/postgres-test.sh`), which they name in
/// `OFFLINE_AGENT_TEST_POSTGRES_URL` (`postgres://USER:PASSWORD@127.0.0.1:PORT/DB`, a
/// role allowed to create databases).
///
/// Created with Debian's `psql` from a clean slate and dropped by `drop()`.
package struct PostgresTestDatabase: Sendable {
    /// The variable naming the server.
    package static let variable = "OFFLINE_AGENT_TEST_POSTGRES_URL"

    /// The server's URL, or why the PostgreSQL tests cannot run here: the variable is unset
    /// (outside `.ci/run` and `scripts/test.sh`) or `psql` is missing.
    package static var server: (url: String?, skipReason: String?) {
        guard let url = ProcessInfo.processInfo.environment[variable], !url.isEmpty else {
            return (nil, "\(variable) is not set: run the tests through .ci/run or scripts/test.sh, which start PostgreSQL (scripts/postgres-test.sh)")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/psql") else {
            return (nil, "/usr/bin/psql is missing: scripts/install-deps.sh installs postgresql")
        }
        return (url, nil)
    }

    /// Whether the PostgreSQL tests can run (for `.enabled(if:)`).
    package static var isAvailable: Bool { server.url != nil }

    /// The URL of the new database.
    package let url: String
    private let serverURL: String
    private let name: String

    /// Creates database `offline_test_<label>_<random>` on the server.
    package init(_ label: String) async throws {
        guard let server = Self.server.url else { throw Unavailable(reason: Self.server.skipReason ?? "") }
        serverURL = server
        name = "offline_test_\(label)_\(UUID().uuidString.prefix(8).lowercased())"
        try await Self.psql(server, "CREATE DATABASE \(name)")
        guard var components = URLComponents(string: server) else { throw Unavailable(reason: "\(Self.variable) is not a URL") }
        components.path = "/" + name
        url = components.string!
    }

    /// Drops the database (the servers using it must have stopped). Called from `defer`,
    /// so it starts `psql` and does not wait for it: the drop needs nothing of this
    /// process, and waiting would hold a cooperative thread.
    package func drop() {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        process.arguments = [serverURL, "-v", "ON_ERROR_STOP=1", "-qAtc", "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"]
        process.standardOutput = nil
        process.standardError = nil
        try? process.run()
    }

    /// Runs one statement with `psql`; throws with its output when it fails.
    package static func psql(_ url: String, _ sql: String) async throws {
        let result = try await CLI.run([url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], executable: "/usr/bin/psql")
        guard result.status == 0 else { throw Unavailable(reason: "psql '\(sql)': \(result.stdout)\(result.stderr)") }
    }

    package struct Unavailable: Error, CustomStringConvertible {
        package var reason: String
        package var description: String { reason }
    }
}
