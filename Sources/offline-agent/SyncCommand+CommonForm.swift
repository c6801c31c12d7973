import ArgumentParser
import OfflineAgent

extension SyncCommand {
    /// Options `sync` takes a value for, by long name.
    static let valueOptions: Set<String> = [
        "root", "app", "manifest", "config", "public-key", "network", "report", "report-deadline", "profile",
        "max-trial-launches",
    ]
    /// `sync`'s flags, by long name.
    static let flags: Set<String> = ["force", "verbose", "json", "no-manifest-query", "allow-unsigned"]

    /// `sync`'s arguments read in the common form a cron line or a unit file uses, without
    /// ArgumentParser; nil leaves them to it.
    ///
    /// Nearly every cron run is a throttled no-op of a few milliseconds, and ArgumentParser
    /// builds `sync`'s argument table by reflection first: runtime conformance lookups that
    /// each scan the binary's whole conformance table, a third of such a run in `perf`
    /// (`bench/run.sh footprint` measures the run). The common form is every option as
    /// `--name value` or `--name=value`, at most once, a non-empty value that does not start
    /// with `-`, and the flags without a value. Anything else (help, a short name, an
    /// unknown or repeated option, a value that does not convert, a failed `validate()`)
    /// returns nil, and ArgumentParser reads the line, so usage errors and help read as
    /// they always did. `CLITests` checks that `sync --help` lists exactly these names and
    /// that both readings agree.
    static func parseCommonForm(_ arguments: [String]) -> SyncCommand? {
        var values: [String: String] = [:]
        var given: Set<String> = []
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            guard argument.hasPrefix("--") else { return nil }
            let word = argument.dropFirst(2)
            let name = String(word.prefix { $0 != "=" })
            let inline = word.firstIndex(of: "=").map { String(word[word.index(after: $0)...]) }
            if flags.contains(name) {
                guard inline == nil, given.insert(name).inserted else { return nil }
                continue
            }
            guard valueOptions.contains(name), values[name] == nil,
                  let value = inline ?? remaining.popFirst(), !value.isEmpty, !value.hasPrefix("-") else { return nil }
            values[name] = value
        }
        var sync = SyncCommand()
        sync.root = values["root"]
        sync.app = values["app"]
        sync.manifest = values["manifest"]
        sync.config = values["config"]
        sync.publicKey = values["public-key"]
        sync.report = values["report"]
        sync.profile = values["profile"]
        guard let network = convert(values["network"], NetworkPolicy.self),
              let reportDeadline = convert(values["report-deadline"], Double.self),
              let maxTrialLaunches = convert(values["max-trial-launches"], Int.self) else { return nil }
        sync.network = network
        sync.reportDeadline = reportDeadline
        sync.maxTrialLaunches = maxTrialLaunches
        sync.force = given.contains("force")
        sync.verbose = given.contains("verbose")
        sync.json = given.contains("json")
        sync.noManifestQuery = given.contains("no-manifest-query")
        sync.allowUnsigned = given.contains("allow-unsigned")
        do { try sync.validate() } catch { return nil }
        return sync
    }

    /// `text` converted as ArgumentParser converts it: `.some(nil)` when absent, nil when it does not convert.
    private static func convert<Value: ExpressibleByArgument>(_ text: String?, _: Value.Type) -> Value?? {
        guard let text else { return .some(nil) }
        guard let value = Value(argument: text) else { return nil }
        return .some(value)
    }
}
