import ArgumentParser
import CommandSupport
import FoundationEssentials
import OfflineAgent

struct CookiesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cookies",
        abstract: "List (values masked) or clear the cookie jar of a profile.",
        discussion: """
            Only persistent cookies are kept between runs; session cookies live for one sync. \
            Exit status: 0 done; 1 the jar cannot be read or removed; 64 usage; 75 a sync holds the lock (--clear).
            """
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The profile whose jar to show or clear.") var profile: String = CookieProfile.defaultName
    @Flag(help: "Remove every cookie of the profile.") var clear = false
    @Flag(help: "Print a JSON array of cookies (values masked).") var json = false

    func run() async throws {
        try await reportingFailures {
            let agent = Agent(root: try ExistingRoot.url(root))
            if clear {
                try await agent.clearCookies(profile: profile)
                printError("offline-agent: cleared the cookies of profile '\(profile)'")
                return
            }
            let cookies = try agent.cookies(profile: profile)
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                print(String(decoding: try encoder.encode(cookies.map(CookieJSON.init)), as: UTF8.self))
                return
            }
            if cookies.isEmpty { print("no cookies in profile '\(profile)'") }
            for cookie in cookies { print(CookieJSON(cookie).line) }
        }
    }
}
