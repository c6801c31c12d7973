import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct ForgetBadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget-bad",
        abstract: "Clear the bad mark of an app's versions: the way out after a rollback.",
        discussion: """
            Without --version every bad mark of the app is cleared. A cleared version may be installed \
            by the next sync again; an active version cleared is served offline again, as good. \
            The clearing is recorded in history.
            Exit status: 0 cleared; 1 nothing (or not that version) is marked bad; 64 usage.
            """
    )

    @OptionGroup var target: AppTarget
    @Option(help: "The version whose mark to clear (default: every bad version of the app).") var version: String?

    func run() async throws {
        try await reportingFailures {
            var wanted: Version?
            if let version {
                guard let parsed = Version(version) else {
                    throw OfflineAgentError(.usage, "invalid version '\(version)': \(Version.format)")
                }
                wanted = parsed
            }
            let cleared = try await target.agent().forgetBad(app: target.app, version: wanted)
            print("\(target.app): bad mark cleared for \(cleared.map(\.description).joined(separator: ", "))")
        }
    }
}
