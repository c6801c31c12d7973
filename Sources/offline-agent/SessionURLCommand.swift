import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct SessionURLCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "session-url",
        abstract: "Print the URL that restores a web view's back/forward list through `offline-agent serve`.",
        discussion: """
            A host app loads the printed http://HOST:PORT/session/restore?history=… URL in a fresh web view: \
            the page rebuilds the list (URL…, oldest first) on /session/item URLs that redirect to each page, \
            its offline copy when there is one, and shows entry --current. --current is an offset from the \
            last URL: 0 the last one, -1 the one before it, …; `--current -1` and `--current=-1` both work.
            Exit status: 0 printed; 64 usage (no URL or more than 50, a URL that is not absolute http or https, \
            --current out of range).
            """
    )

    @Option(help: "The host of the `serve` server.") var host: String = "127.0.0.1"
    @Option(help: "The port of the `serve` server.") var port: Int = 8421
    // `.unconditional`: the value is negative, and would otherwise be taken for an option.
    @Option(parsing: .unconditional, help: "The current entry: 0 the last URL, -1 the one before it, ….")
    var current: Int = 0
    @Argument(help: "The pages of the history, oldest first (1 to 50 http or https URLs).") var urls: [String] = []

    func run() async throws {
        try await reportingFailures {
            let entries = try urls.map { text in
                guard let url = URL(string: text) else { throw OfflineAgentError(.usage, "invalid URL '\(text)'") }
                return url
            }
            let history = try SessionHistory(entries: entries, currentPage: current)
            print(try history.restoreURL(host: host, port: port).absoluteString)
        }
    }
}
