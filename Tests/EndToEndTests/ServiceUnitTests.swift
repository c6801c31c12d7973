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

    /// The unit's settings: every `Key=value` line, in order (keys may repeat).
    static func settings(_ unit: String) throws -> [(key: String, value: String)] {
        try String(contentsOfFile: "\(Repo.root)/examples/systemd/\(unit)", encoding: .utf8).split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), let eq = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<eq]), String(line[line.index(after: eq)...]))
        }
    }

    @Test(
        "systemd-analyze verify accepts the example units (ExecStart pointed at the built binary)",
        .enabled(if: FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze is not installed"),
        arguments: ["offline-agent-sync.service", "offline-agent-serve.service"])
    func verify(_ unit: String) throws {
        let dir = TemporaryDirectory("units")
        let text = try String(contentsOfFile: "\(Repo.root)/examples/systemd/\(unit)", encoding: .utf8)
            .replacingOccurrences(of: "/usr/local/bin/offline-agent", with: CLI.binary)
        try text.write(toFile: dir.file(unit), atomically: true, encoding: .utf8)
        let result = try run("/usr/bin/timeout", ["60", Self.analyze, "verify", "--man=no", dir.file(unit)], cwd: dir.path)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(!result.stderr.contains(unit), "\(result.stderr)")
    }

    /// Issue 39, surprise 13: mirror hosts forward API calls and WebSockets to the real
    /// origins, so the serve unit must let it connect out to any address and resolve
    /// names; inbound is limited by its loopback bind and serve's own peer check.
    @Test("the serve unit allows what serve does: outbound connections to any origin, name resolution, a loopback bind")
    func serveUnitAllowsForwarding() throws {
        let settings = try Self.settings("offline-agent-serve.service")
        let denies = settings.filter { $0.key == "IPAddressDeny" }.map(\.value)
        let allows = settings.filter { $0.key == "IPAddressAllow" }.map(\.value)
        #expect(denies.allSatisfy(\.isEmpty) || allows.contains("any"), "IPAddressDeny=\(denies) would block forwarding to origins")
        let families = settings.filter { $0.key == "RestrictAddressFamilies" }.flatMap { $0.value.split(separator: " ").map(String.init) }
        for family in ["AF_INET", "AF_INET6", "AF_UNIX"] { #expect(families.isEmpty || families.contains(family), "\(family)") }
        let exec = try #require(settings.first { $0.key == "ExecStart" }?.value)
        #expect(exec.contains(" serve ") && !exec.contains("--allow-remote") && !exec.contains("--host"), "\(exec)")
    }
}
