import ArgumentParser
import Testing

@testable import offline_agent

/// `sync`'s cron fast path (`SyncCommand.parseCommonForm`) reads what ArgumentParser reads,
/// or leaves the line to it.
@Suite("sync's common form")
struct SyncCommonFormTests {
    static let base = ["--root", "/var/lib/offline-agent", "--app", "mall", "--manifest", "https://h5.example.com/manifest"]

    @Test("every option and flag in sync --help is known to the fast path, and nothing else")
    func namesMatchHelp() throws {
        let help = SyncCommand.helpMessage(columns: 1000)
        let regex = try Regex("--([a-z][a-z-]*)")
        var named = Set(help.matches(of: regex).map { String(help[$0.range].dropFirst(2)) })
        named.remove("help")
        #expect(named == SyncCommand.valueOptions.union(SyncCommand.flags))
        #expect(SyncCommand.valueOptions.isDisjoint(with: SyncCommand.flags))
    }

    @Test("the common form reads as ArgumentParser reads it", arguments: [
        base,
        base + ["--force", "--json", "--verbose", "--no-manifest-query"],
        ["--root=/r", "--app=mall", "--manifest=http://127.0.0.1:8080/m?app=a&x=1"],
        base + ["--network", "metered", "--report", "https://c.example.com/report", "--report-deadline", "2.5"],
        base + ["--network=unmetered", "--profile", "alice", "--max-trial-launches", "0", "--public-key", "a2V5"],
        ["--config", "/etc/offline-agent/agent.json", "--root", "/r", "--force"],
        ["--config=/etc/offline-agent/agent.json", "--max-trial-launches=7", "--report-deadline=600"],
    ])
    func agrees(_ arguments: [String]) throws {
        let fast = try #require(SyncCommand.parseCommonForm(arguments))
        // Every property was given a value: reading one left unparsed traps.
        let unset = Mirror(reflecting: fast).children.filter { "\($0.value)".contains("*definition*") }
        try #require(unset.isEmpty, "\(unset.map { $0.label ?? "?" })")
        let full = try SyncCommand.parse(arguments)
        #expect(Self.fields(fast) == Self.fields(full))
    }

    @Test("anything else is left to ArgumentParser", arguments: [
        ["--help"], ["-h"], base + ["--help"],
        base + ["-v"], base + ["--frobnicate"], base + ["extra"], base + ["--"],
        base + ["--app", "shop"],                       // repeated
        base + ["--force", "--force"],
        base + ["--force=true"],                        // a flag with a value
        ["--root", "/r", "--app"],                      // a missing value
        ["--root", "/r", "--app", "--manifest", "x"],   // a value that is an option
        base + ["--profile="],                          // an empty value
        base + ["--network", "cellular"],               // does not convert
        base + ["--report-deadline", "soon"], base + ["--max-trial-launches", "1.5"],
        base + ["--report-deadline", "0"],              // fails validate()
        base + ["--max-trial-launches", "-1"],
        ["--root", "/r", "--app", "mall"],              // no manifest
        ["--config", "c.json", "--app", "mall"],
        [],
    ])
    func fallsBack(_ arguments: [String]) {
        #expect(SyncCommand.parseCommonForm(arguments) == nil)
    }

    /// Every parsed property of `sync`, as text.
    static func fields(_ sync: SyncCommand) -> [String] {
        [
            "\(sync.root as Any)", "\(sync.app as Any)", "\(sync.manifest as Any)", "\(sync.config as Any)",
            "\(sync.publicKey as Any)", "\(sync.network as Any)", "\(sync.report as Any)", "\(sync.reportDeadline as Any)",
            "\(sync.profile as Any)", "\(sync.maxTrialLaunches as Any)",
            "\(sync.force)", "\(sync.verbose)", "\(sync.json)", "\(sync.noManifestQuery)", "\(sync.allowUnsigned)",
        ]
    }
}
