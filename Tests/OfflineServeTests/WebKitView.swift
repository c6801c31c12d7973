import Foundation
import Testing
import TestSupport

/// One WebKitGTK web view in a process of its own (Tests/WebKit/webkit_pages.py under
/// xvfb-run, with the system's python3, whose `gi` has WebKit2 4.1): pages load in it one
/// after another and keep running between commands, as in a kiosk.
final class WebKitView: @unchecked Sendable {
    private let process = ChildProcess()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private var buffer: [UInt8] = []

    /// Starts the view; it quits by itself after `seconds`, so every read here ends.
    init(seconds: Int = 480) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/xvfb-run")
        process.arguments = ["-a", "/usr/bin/python3", "\(Repo.root)/Tests/WebKit/webkit_pages.py", String(seconds)]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Drained on a thread of its own: a full stderr pipe would stall the view.
        let errors = self.errors
        Thread.detachNewThread { _ = errors.fileHandleForReading.readAllRetryingInterrupts() }
    }

    /// Waits for "ready" (or the view's end).
    func ready() async throws -> Bool { try await line() == "ready" }

    /// Navigates to `url`; what the page reported (`report(value)`), or `{"page": {"title", "text"}}`
    /// for a page without `report`, `{"loadFailed": ...}`, nil past the view's bound.
    func load(_ url: String) async throws -> Any? { try await send(["load": url]) }

    /// Runs `script` in the page shown; what it then reports, nil past the bound.
    func eval(_ script: String) async throws -> Any? { try await send(["eval": script]) }

    private func send(_ command: [String: String]) async throws -> Any? {
        // A view that ended has no reader on its stdin.
        guard process.isRunning else { return nil }
        var data = try JSONSerialization.data(withJSONObject: command)
        data.append(UInt8(ascii: "\n"))
        try input.fileHandleForWriting.write(contentsOf: data)
        guard let text = try await line(),
              let answer = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return nil }
        return answer["result"].flatMap { $0 is NSNull ? nil : $0 }
    }

    /// The next line the view prints; nil once it ended.
    private func line() async throws -> String? {
        try await LocalHTTP.onThread { [self] in
            while true {
                if let end = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let text = String(decoding: buffer[..<end], as: UTF8.self)
                    buffer.removeSubrange(...end)
                    return text
                }
                let chunk = output.fileHandleForReading.readSomeRetryingInterrupts()
                if chunk.isEmpty { return nil }
                buffer += chunk
            }
        }
    }

    /// Ends the view: its stdin closes, and it quits.
    func close() async {
        try? input.fileHandleForWriting.close()
        await process.exited()
    }
}
