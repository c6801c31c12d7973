import Foundation
import Testing
import TestSupport

/// The example systemd units stay sandboxed: `systemd-analyze security --offline=true`
/// rates each at 2.5 or lower (exposure 0 … 10, lower is safer).
@Suite("Service units")
struct ServiceUnitTests {
    static let analyze = "/usr/bin/systemd-analyze"

    @Test(
        "systemd-analyze security rates the example units 2.5 or lower",
        .enabled(if: FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze is not installed"),
        arguments: ["offline-agent-sync.service", "offline-agent-serve.service"])
    func exposure(_ unit: String) throws {
        let result = try run("/usr/bin/timeout", ["60", Self.analyze, "security", "--offline=true", "--no-pager", unit],
                             cwd: "\(Repo.root)/examples/systemd")
        let line = try #require(result.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(result.stderr)")
        let score = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(score <= 2.5, "\(line)")
    }
}
