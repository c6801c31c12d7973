import Foundation
import OfflineAgent
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A fleet-report collector on 127.0.0.1 (port 0) implementing the wire format of
/// docs/PROTOCOL.md, "Fleet reports": `POST` of `{"events":[…]}` (1–500 events, body
/// ≤ 1 MiB), each event checked field by field; 200 `{"accepted":N,"duplicates":M}`
/// (de-duplicated by id), 400 with a one-line reason, 413 over the cap. `mode` makes
/// it answer 503 (optionally with `Retry-After`), refuse every batch, stall or redirect;
/// `token` makes it answer 401 to a request without `Authorization: Bearer TOKEN`, as
/// `offline-server --report-token` does.
package final class ReportCollector: @unchecked Sendable {
    package enum Mode: Sendable, Equatable {
        /// Checks and stores (the default).
        case accept
        /// 503, with this `Retry-After` when set.
        case unavailable(retryAfter: String?)
        /// 400 for every batch.
        case reject
        /// Reads the request, answers nothing for this long, then closes.
        case stall(seconds: Double)
        /// Stores the events, then answers nothing for this long (the agent dies mid-post).
        case storeThenStall(seconds: Double)
        /// 307 to this URL.
        case redirect(URL)
        /// Checks and stores, answering each request after this long (a slow collector, or
        /// a slow CPU on the sender's side).
        case slow(seconds: Double)
    }

    package let port: Int
    private let listener: LoopbackListener
    private let state = Mutex((mode: Mode.accept, events: [Data](), ids: Set<String>(), batches: [Int](),
                               duplicates: 0, posts: 0, otherPosts: 0, token: String?.none, authorizations: [String?]()))

    package var url: URL { URL(string: "http://127.0.0.1:\(port)/report")! }
    package var mode: Mode {
        get { state.withLock { $0.mode } }
        set { state.withLock { $0.mode = newValue } }
    }
    /// Stored events, each id once, in arrival order.
    package var events: [[String: Any]] {
        state.withLock { $0.events }.compactMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
    }
    /// The event count of every request that reached the checks, in order.
    package var batches: [Int] { state.withLock { $0.batches } }
    /// Events received again (same id), acknowledged as duplicates.
    package var duplicates: Int { state.withLock { $0.duplicates } }
    /// Requests received, whatever the answer.
    package var posts: Int { state.withLock { $0.posts } }
    /// POSTs to another path than the report URL (an agent's `POST /enrol`), answered `404`.
    package var otherPosts: Int { state.withLock { $0.otherPosts } }
    /// The bearer token required; nil: none.
    package var token: String? {
        get { state.withLock { $0.token } }
        set { state.withLock { $0.token = newValue } }
    }
    /// The `Authorization` header of every request received (nil: none), in order.
    package var authorizations: [String?] { state.withLock { $0.authorizations } }

    package init() throws {
        listener = try LoopbackListener()
        port = listener.port
        listener.start { [self] client in serve(client) }
    }

    package func stop() { listener.stop() }
    deinit { stop() }

    /// Waits (at most `timeout` seconds) until `count` events are stored. The bound is on
    /// events that never come, not a speed: 5 minutes, for a loaded machine.
    package func waitForEvents(_ count: Int, timeout: Double = 300) async -> Bool {
        await waitUntil(timeout: timeout) { self.events.count >= count }
    }

    /// Waits (at most `timeout` seconds) until `condition` holds.
    package func waitUntil(timeout: Double = 300, _ condition: @escaping () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var buffer: [UInt8] = []
        while let (head, body) = readRequest(fd, &buffer) {
            // A collector without enrolment: POST /enrol (or any other path) is 404, and no report.
            guard head.hasPrefix("POST /report ") || !head.hasPrefix("POST ") else {
                state.withLock { $0.otherPosts += 1 }
                guard LoopbackSocket.sendAll(fd, Array("HTTP/1.1 404 X\r\nContent-Length: 0\r\n\r\n".utf8)) else { return }
                continue
            }
            state.withLock { $0.posts += 1 }
            let (status, text, headers) = answer(head: head, body: body)
            if status == 0 { return }  // stalled: the connection just ends
            var response = "HTTP/1.1 \(status) X\r\nContent-Length: \(text.utf8.count)\r\n"
            for (name, value) in headers { response += "\(name): \(value)\r\n" }
            response += "\r\n" + text
            guard LoopbackSocket.sendAll(fd, Array(response.utf8)) else { return }
        }
    }

    /// Status 0: no answer.
    private func answer(head: String, body: [UInt8]) -> (Int, String, [(String, String)]) {
        guard head.hasPrefix("POST ") else { return (405, "POST only\n", []) }
        let authorization = head.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("authorization:") }
            .map { $0.dropFirst("authorization:".count).trimmingCharacters(in: .whitespaces) }
        let token = state.withLock { state in
            state.authorizations.append(authorization)
            return state.token
        }
        if let token, authorization != "Bearer \(token)" {
            return (401, "a report needs the collector's bearer token\n", [("WWW-Authenticate", "Bearer")])
        }
        switch mode {
        case .redirect(let url):
            return (307, "elsewhere\n", [("Location", url.absoluteString)])
        case .unavailable(let retryAfter):
            return (503, "try later\n", retryAfter.map { [("Retry-After", $0)] } ?? [])
        case .reject:
            return (400, "refused by the test\n", [])
        case .stall(let seconds):
            Thread.sleep(forTimeInterval: seconds)
            return (0, "", [])
        case .slow(let seconds):
            Thread.sleep(forTimeInterval: seconds)
        case .accept, .storeThenStall:
            break
        }
        guard body.count <= 1 << 20 else { return (413, "body over 1 MiB\n", []) }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let events = object["events"] as? [[String: Any]], (1...500).contains(events.count),
              (object["events"] as? [Any])?.count == events.count else {
            return (400, "body must be {\"events\":[1 to 500 objects]}\n", [])
        }
        for event in events {
            if let reason = Self.invalid(event) { return (400, "invalid event: \(reason)\n", []) }
        }
        let stored = events.map { (id: $0["id"] as! String, data: (try? JSONSerialization.data(withJSONObject: $0)) ?? Data()) }
        let (accepted, duplicates) = state.withLock { state -> (Int, Int) in
            state.batches.append(events.count)
            var accepted = 0, duplicates = 0
            for (id, data) in stored {
                if state.ids.insert(id).inserted {
                    state.events.append(data)
                    accepted += 1
                } else {
                    duplicates += 1
                }
            }
            state.duplicates += duplicates
            return (accepted, duplicates)
        }
        if case .storeThenStall(let seconds) = mode {
            Thread.sleep(forTimeInterval: seconds)
            return (0, "", [])
        }
        return (200, "{\"accepted\":\(accepted),\"duplicates\":\(duplicates)}", [("Content-Type", "application/json")])
    }

    static let kinds: Set<String> = ["updated", "failed", "deferred", "rolled-back", "marked-good", "marked-bad", "usage"]

    /// Why `event` breaks the wire format, or nil.
    static func invalid(_ event: [String: Any]) -> String? {
        func string(_ key: String, limit: Int = 256, required: Bool = false) -> String? {
            guard let value = event[key] else { return required ? "\(key) missing" : nil }
            guard let text = value as? String else { return "\(key) not a string" }
            return text.utf8.count <= limit ? nil : "\(key) over \(limit) bytes"
        }
        func integer(_ key: String, required: Bool, positive: Bool = false) -> String? {
            guard let value = event[key] else { return required ? "\(key) missing" : nil }
            guard type(of: value) != Bool.self, let number = value as? NSNumber,
                  number.doubleValue == number.doubleValue.rounded(), number.int64Value >= (positive ? 1 : 0) else {
                return "\(key) not an integer \(positive ? ">" : "≥") 0"
            }
            return nil
        }
        guard let id = event["id"] as? String, (8...64).contains(id.count),
              id.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "-" || $0 == "_" }) else {
            return "id must be 8-64 of [A-Za-z0-9_-]"
        }
        guard let time = event["time"] as? String, RFC3339.date(from: time) != nil, time.hasSuffix("Z") else { return "time not RFC 3339 UTC" }
        if let problem = string("device", required: true) ?? string("app", required: true) ?? string("version")
            ?? string("previousVersion") ?? string("errorCode") ?? string("message", limit: 1024) {
            return problem
        }
        guard let kind = event["event"] as? String, kinds.contains(kind) else { return "unknown event" }
        if let via = event["via"], !["patch", "full"].contains(via as? String ?? "") { return "via must be patch or full" }
        if let problem = integer("bytes", required: true) ?? integer("fullSize", required: false) ?? integer("durationMs", required: true) {
            return problem
        }
        if kind == "usage" {
            if let problem = integer("offlineHits", required: true) ?? integer("periodSeconds", required: true, positive: true) { return problem }
            guard let fallbacks = event["fallbacks"] as? [String: Any] else { return "fallbacks missing" }
            let reasons = Set(FallbackReason.allCases.map(\.rawValue)).union(["not-whitelisted"])
            for (reason, count) in fallbacks {
                guard reasons.contains(reason), let number = count as? NSNumber, number.intValue >= 0 else { return "bad fallback \(reason)" }
            }
        }
        return nil
    }

    /// One request: its head and its Content-Length body.
    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> (String, [UInt8])? {
        let terminator: [UInt8] = [13, 10, 13, 10]
        var head: String?
        var length = 0
        while true {
            if head == nil, let end = buffer.firstRange(of: terminator) {
                head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                buffer.removeSubrange(..<end.upperBound)
                for line in head!.components(separatedBy: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                    length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let head, buffer.count >= length {
                let body = Array(buffer[..<length])
                buffer.removeSubrange(..<length)
                return (head, body)
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }
}
