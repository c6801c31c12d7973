// A host app's whole offline integration: keep one app's package current, then
// answer which local file stands for a page, and optionally serve the package to a
// web view from a loopback server inside this process.
//
//     host-app ROOT APP MANIFEST_URL PAGE_URL [--public-key BASE64] [--serve]
//
// Prints `synced: …`, then `file: PATH` (or `network: REASON`), and with `--serve`
// `open: URL` (the address a web view loads) and runs until SIGINT or SIGTERM.
import Foundation
import OfflineAgent
import OfflineServe

var arguments = Array(CommandLine.arguments.dropFirst())
let serve = arguments.contains("--serve")
arguments.removeAll { $0 == "--serve" }
var publicKey: String?
if let flag = arguments.firstIndex(of: "--public-key"), flag + 1 < arguments.count {
    publicKey = arguments[flag + 1]
    arguments.removeSubrange(flag...flag + 1)
}
guard arguments.count == 4, let manifestURL = URL(string: arguments[2]), let pageURL = URL(string: arguments[3]) else {
    FileHandle.standardError.write(Data("usage: host-app ROOT APP MANIFEST_URL PAGE_URL [--public-key BASE64] [--serve]\n".utf8))
    exit(64)
}
let root = arguments[0], app = arguments[1]

/// Writes one line to stdout at once (unbuffered), so a script reading it sees each
/// line as soon as it is printed, also while the server runs.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

// One Agent per root. It takes the root's lock for each sync, so it can share the
// root with `offline-agent sync` run by a systemd timer.
let agent = Agent(root: URL(fileURLWithPath: root))

// Check the manifest and install a newer version when there is one. `sync` never
// throws: a failure is `.failed` with an `OfflineAgentError`, and whatever version was
// active stays active, so the app goes on to resolve either way. A public key makes
// every manifest need a valid Ed25519 signature; `force` skips the 5-minute throttle.
let report = await agent.sync(app: app, manifest: manifestURL, options: SyncOptions(force: true, publicKey: publicKey))
say("synced: \(report.result) \(report.version.map { "\($0)" } ?? "nothing installed")")
if let error = report.error {
    say("sync error: \(error.cause): \(error)")
}

// Which local file serves this page? Only whitelisted URLs of an active, usable
// version resolve to a file; anything else says why to load it from the network.
switch try await agent.resolve(pageURL) {
case .file(let file):
    say("file: \(file.path)")
case .network(let reason, _):
    say("network: \(reason)")
}

// A web view that cannot read files directly (or should keep same-origin rules)
// loads pages through the loopback server instead. `/open?url=` redirects to the
// local copy when the URL resolves, otherwise to the network URL itself.
func serveInProcess(root: String, page: URL) async throws {
    let server = try LocalServer(configuration: .init(root: root, port: 0))
    let query = page.absoluteString.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    // Port 0 picks a free port; a host app that wants stable origins (localStorage)
    // uses a fixed one. Runs until SIGINT or SIGTERM, finishing in-flight responses.
    try await server.run(stopOnSignals: true) { host, port in
        FileHandle.standardOutput.write(Data("open: http://\(host):\(port)/open?url=\(query)\n".utf8))
    }
}

if serve {
    try await serveInProcess(root: root, page: pageURL)
}
