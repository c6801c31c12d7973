import ArgumentParser
import CommandSupport
import FoundationEssentials
import OfflineAgent

struct ResolveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Print the file that serves URL offline; exit 1 with the reason when it is loaded from the network.",
        discussion: """
            With --serve-port, print instead the URL a web view loads through `serve` on that port: \
            the URL on its origin's mirror host (same path, query and fragment), or exit 1 when no \
            active whitelist names the URL's origin.
            """
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The device id for rollout (the root's stable id when absent).") var deviceId: String?
    @Option(help: "Print the mirror URL for `serve` listening on this port.") var servePort: Int?
    @Argument(help: "The URL a web view is about to load.") var url: String

    func run() async throws {
        try await reportingFailures {
            guard let target = URL(string: url), target.scheme != nil else {
                throw OfflineAgentError(.usage, "invalid URL '\(url)'")
            }
            if let servePort {
                guard (1...65535).contains(servePort) else { throw OfflineAgentError(.usage, "--serve-port must be 1...65535") }
                let root = try ExistingRoot.url(root)
                let store = Store(root: root.path)
                let resolver = Resolver(store: store, deviceID: try deviceId ?? DeviceID.load(root: store.root))
                guard let mirror = resolver.mirrorURL(for: target, servePort: servePort) else {
                    printError("offline-agent: not on a mirrored origin: no active whitelist names \(MirrorOrigin(url: target)?.origin ?? url)")
                    throw ExitCode(1)
                }
                print(mirror)
                return
            }
            switch try await Agent(root: try ExistingRoot.url(root)).resolve(target, deviceID: deviceId) {
            case .file(let file):
                print(file.path)
            case .network(let reason, let app):
                printError("offline-agent: not served offline: \(reason.rawValue)\(app.map { " (app \($0))" } ?? "")")
                throw ExitCode(1)
            }
        }
    }
}
