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
    func exposure(_ unit: String) async throws {
        let result = try await run("/usr/bin/timeout", ["60", Self.analyze, "security", "--offline=true", "--no-pager", unit],
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
    func verify(_ unit: String) async throws {
        let dir = TemporaryDirectory("units")
        let text = try String(contentsOfFile: "\(Repo.root)/examples/systemd/\(unit)", encoding: .utf8)
            .replacingOccurrences(of: "/usr/local/bin/offline-agent", with: CLI.binary)
        try text.write(toFile: dir.file(unit), atomically: true, encoding: .utf8)
        let result = try await run("/usr/bin/timeout", ["60", Self.analyze, "verify", "--man=no", dir.file(unit)], cwd: dir.path)
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

    /// Issue 41: the bus policy names the user that may own org.offlineagent.Agent1, so the
    /// units run as the static user of the shipped sysusers file (a `DynamicUser=` exists
    /// only while its unit runs), both the same, owning the one root they share.
    @Test("both units run as the static sysusers user the bus policy lets own the name, and share the root")
    func unitsRunAsThePolicysStaticUser() throws {
        let sysusers = try String(contentsOfFile: "\(Repo.root)/packaging/offline-agent/dbus/offline-agent.sysusers", encoding: .utf8)
        let user = try #require(sysusers.split(separator: "\n").first { $0.hasPrefix("u ") }?.split(separator: " ").dropFirst().first.map(String.init))
        let policy = try String(contentsOfFile: "\(Repo.root)/packaging/offline-agent/dbus/org.offlineagent.Agent1.conf", encoding: .utf8)
        #expect(policy.contains("<policy user=\"\(user)\">\n    <allow own=\"org.offlineagent.Agent1\"/>"), "the policy does not let \(user) own the name")
        for unit in ["offline-agent-sync.service", "offline-agent-serve.service"] {
            let settings = try Self.settings(unit)
            func values(_ key: String) -> [String] { settings.filter { $0.key == key }.map(\.value) }
            #expect(values("DynamicUser").allSatisfy { ["no", "false", "0", ""].contains($0) }, "\(unit): DynamicUser=\(values("DynamicUser"))")
            #expect(values("User") == [user], "\(unit): User=\(values("User"))")
            #expect(values("Group") == [user], "\(unit): Group=\(values("Group"))")
            #expect(values("StateDirectory") == ["offline-agent"], "\(unit)")
        }
    }

    /// The shipped serve unit hosts the D-Bus service (docs/DBUS.md, "Where it runs"): it is
    /// ready once it owns the name, and it can read /proc/locks, which the service reads to
    /// tell another process's running sync from one that ended.
    @Test("the serve unit runs the D-Bus service on the system bus with the timer's config, and sees /proc/locks")
    func serveUnitHostsTheBusService() throws {
        let settings = try Self.settings("offline-agent-serve.service")
        func values(_ key: String) -> [String] { settings.filter { $0.key == key }.map(\.value) }
        #expect(values("Type") == ["dbus"] && values("BusName") == ["org.offlineagent.Agent1"], "\(values("Type")) \(values("BusName"))")
        let exec = try #require(values("ExecStart").first)
        #expect(exec.contains(" --dbus system ") && exec.hasSuffix(" --config /etc/offline-agent/agent.json"), "\(exec)")
        let sync = try #require(Self.settings("offline-agent-sync.service").first { $0.key == "ExecStart" }?.value)
        #expect(sync.hasSuffix(" --config /etc/offline-agent/agent.json"), "the serve unit's --config is not the timer's: \(sync)")
        #expect(values("ProcSubset").allSatisfy { $0 != "pid" }, "ProcSubset=pid hides /proc/locks")
        let activation = try String(contentsOfFile: "\(Repo.root)/packaging/offline-agent/dbus/org.offlineagent.Agent1.service", encoding: .utf8)
        #expect(activation.contains("SystemdService=offline-agent-serve.service"))
    }

    /// The command line of the serve unit is one `serve` accepts: run with an empty root
    /// and a config of a temporary directory instead, on a private session bus instead of
    /// the system bus, it owns the name.
    @Test(
        "serve, run with the serve unit's arguments (paths and bus swapped for private ones), owns the bus name",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon"), "dbus-daemon is not installed"))
    func serveUnitCommandRuns() async throws {
        let dir = TemporaryDirectory("unit-serve")
        // Empty, as StateDirectory= leaves it on a device before the first sync.
        let root = dir.file("root")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        let config = dir.file("agent.json")
        try #"{"root": "ROOT", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://127.0.0.1:9/manifest"}]}"#
            .replacingOccurrences(of: "ROOT", with: root).write(toFile: config, atomically: true, encoding: .utf8)
        let exec = try #require(Self.settings("offline-agent-serve.service").first { $0.key == "ExecStart" }?.value)
        let arguments = exec.split(separator: " ").dropFirst().map(String.init).map { argument in
            argument == "/var/lib/offline-agent" ? root : argument == "/etc/offline-agent/agent.json" ? config
                : argument == "system" ? "session" : argument == "8421" ? "0" : argument
        }
        let bus = try await PrivateBus()
        let serve = try CLI.start(arguments, environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address])
        // The port line, then the bus line; EOF (an empty line) if serve refused the arguments.
        let listening = await serve.out.fileHandleForReading.availableLine()
        let owned = await serve.out.fileHandleForReading.availableLine()
        serve.process.terminate()
        let result = await CLI.finish(serve)
        #expect(listening.hasPrefix("listening"), "\(listening) \(result.stderr)")
        #expect(owned == "dbus: org.offlineagent.Agent1 on the session bus\n", "\(owned) \(result.stderr)")
    }
}
