import ArgumentParser
import FoundationEssentials
import OfflineAgent

/// `--root DIR --app NAME`: the options of every command that acts on one installed app.
struct AppTarget: ParsableArguments {
    @Option(help: "The agent's root directory (made by sync; never created here).") var root: String
    @Option(help: "The app's name.") var app: String

    /// An agent over the existing root (`ExistingRoot`: a missing root is an error).
    func agent() throws -> Agent { Agent(root: try ExistingRoot.url(root)) }
}
