import Foundation
import OfflineServer
import TestSupport
import Testing

/// `POST /report` of the reference server: a valid batch stored and counted, every
/// schema rule refused whole with 400 and its reason, 413 over the cap, duplicates
/// counted once.
@Suite("Fleet reports: POST /report")
struct FleetReportIngestTests {
    typealias C = FleetReportClient

    func withServer(_ body: (_ base: String) async throws -> Void) async throws {
        let dir = try PublishFixtures.temporaryDirectory("fleet-db")
        defer { PublishFixtures.cleanUp(dir) }
        try await C.withServer(database: dir + "/reports.sqlite") { try await body($0.baseURL) }
    }

    @Test("a valid batch is stored: receipt, /stats per version and /metrics add up exactly")
    func validBatch() async throws {
        try await withServer { base in
            let events = [
                C.event("updated", device: "d1", version: "2.0.0", ["via": "patch", "bytes": 300, "fullSize": 1000, "previousVersion": "1.0.0"]),
                C.event("updated", device: "d2", version: "2.0.0", ["via": "full", "bytes": 1000, "fullSize": 1000]),
                C.event("failed", device: "d3", version: "2.0.0", ["errorCode": "hash-mismatch", "bytes": 50, "message": "sha-256 differs"]),
                C.event("failed", device: "d3", version: "2.0.0", ["errorCode": "hash-mismatch"]),
                C.event("failed", device: "d4", version: "2.0.0", ["errorCode": "network"]),
                C.event("failed", device: "d4", version: "2.0.0"),
                C.event("rolled-back", device: "d1", version: "1.0.0", ["previousVersion": "2.0.0"]),
                C.event("deferred", device: "d5", version: nil),
                C.event("usage", device: "d1", version: "1.0.0", ["offlineHits": 90, "fallbacks": ["not-whitelisted": 6, "missing-file": 4]]),
                C.event("updated", app: "other", device: "d1", version: "9.0.0", ["via": "full", "bytes": 7]),
            ]
            let answer = try await C.post(base, try C.body(events))
            #expect(answer.status == 200, "\(answer.body)")
            #expect(answer.receipt?.accepted == 10)
            #expect(answer.receipt?.duplicates == 0)

            let stats = try await C.stats(base)
            #expect(stats["app"] as? String == "fleet")
            #expect(stats["events"] as? Int == 9)
            #expect(stats["devices"] as? Int == 5)
            #expect(stats["bytesDownloaded"] as? Int == 1350)
            #expect(stats["bytesSaved"] as? Int == 700)
            #expect(stats["offlineHits"] as? Int == 90)
            #expect(stats["fallbacks"] as? [String: Int] == ["missing-file": 4, "not-whitelisted": 6])
            #expect(stats["offlineHitRatio"] as? Double == 0.9)
            #expect((stats["versions"] as? [[String: Any]])?.map { $0["version"] as? String } == ["2.0.0", "1.0.0"])
            let v2 = try #require(C.version(stats, "2.0.0"))
            // d1 rolled back from 2.0.0 to 1.0.0 after updating: it is on 1.0.0 now, and the
            // rollback counts against 2.0.0, the version it left.
            #expect(v2["devices"] as? Int == 1)
            #expect(v2["rolledBack"] as? Int == 1)
            #expect(v2["updated"] as? Int == 2)
            #expect(v2["failed"] as? Int == 4)
            #expect(v2["successRate"] as? Double == 2.0 / 6.0)
            #expect(v2["bytesDownloaded"] as? Int == 1350)
            #expect(v2["bytesSaved"] as? Int == 700)
            let failures = try #require(v2["topFailures"] as? [[String: Any]])
            #expect(failures.count == 3)
            #expect(failures.first?["errorCode"] as? String == "hash-mismatch")
            #expect(failures.first?["count"] as? Int == 2)
            #expect(failures.contains { $0["errorCode"] is NSNull && $0["count"] as? Int == 1 })
            let v1 = try #require(C.version(stats, "1.0.0"))
            #expect(v1["rolledBack"] as? Int == 0)
            #expect(v1["successRate"] is NSNull)
            #expect(v1["devices"] as? Int == 1)
            #expect((try await C.stats(base, app: "other"))["events"] as? Int == 1)

            let metrics = try await C.metrics(base)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "patch"]) == 1)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "full"]) == 1)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "hash-mismatch"]) == 2)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "network"]) == 1)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "unknown"]) == 1)
            #expect(metrics.value("offline_server_report_rollbacks_total", ["app": "fleet"]) == 1)
            #expect(metrics.value("offline_server_report_downloaded_bytes_total", ["app": "fleet"]) == 1350)
            #expect(metrics.value("offline_server_report_saved_bytes_total", ["app": "fleet"]) == 700)
            #expect(metrics.value("offline_server_report_offline_hits_total", ["app": "fleet"]) == 90)
            #expect(metrics.value("offline_server_report_fallbacks_total", ["app": "fleet", "reason": "not-whitelisted"]) == 6)
            #expect(metrics.value("offline_server_report_offline_hit_ratio", ["app": "fleet"]) == 0.9)
            #expect(metrics.value("offline_server_report_events_total", ["app": "fleet", "event": "deferred"]) == 1)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "other", "version": "other", "via": "full"]) == 1)
        }
    }

    @Test("label values devices choose are bounded in /metrics (other); /stats keeps versions and causes as sent, bounds reasons")
    func boundedLabels() async throws {
        try await withServer { base in
            let odd = "we\"ird\\cause{}"
            let events = [
                C.event("failed", ["errorCode": odd]),
                C.event("failed", ["errorCode": "disk-full"]),
                C.event("updated", version: "beta build", ["via": "full"]),
                C.event("updated", version: "2.0.0", ["via": "full"]),
                C.event("usage", ["offlineHits": 1, "fallbacks": ["made-up": 3, "not-whitelisted": 1]]),
            ]
            #expect(try await C.post(base, try C.body(events)).receipt?.accepted == 5)
            // Parsed strictly: a label value that broke the text format would throw here.
            let metrics = try await C.metrics(base)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "other"]) == 1)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "disk-full"]) == 1)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "other", "via": "full"]) == 1)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "full"]) == 1)
            #expect(metrics.value("offline_server_report_fallbacks_total", ["app": "fleet", "reason": "other"]) == 3)
            #expect(metrics.value("offline_server_report_fallbacks_total", ["app": "fleet", "reason": "not-whitelisted"]) == 1)
            let stats = try await C.stats(base)
            #expect((stats["versions"] as? [[String: Any]])?.map { $0["version"] as? String } == ["2.0.0", "beta build"])
            let failures = C.version(stats, "2.0.0")?["topFailures"] as? [[String: Any]]
            #expect(Set(failures?.compactMap { $0["errorCode"] as? String } ?? []) == [odd, "disk-full"])
            #expect(stats["fallbacks"] as? [String: Int] == ["other": 3, "not-whitelisted": 1])
        }
    }

    /// One rule each: the event (or body) that breaks it, and a word the reason must name.
    struct Rule: Sendable, CustomStringConvertible {
        var description: String
        var reason: String
        var body: @Sendable () throws -> Data

        /// A valid event first, then `bad`: a refusal must store neither.
        static func event(_ description: String, _ reason: String, _ bad: @escaping @Sendable () -> [String: Any]) -> Rule {
            Rule(description: description, reason: reason) {
                try C.body([C.event("updated", ["via": "full"]), bad()])
            }
        }

        static func raw(_ description: String, _ reason: String, _ text: String) -> Rule {
            Rule(description: description, reason: reason) { Data(text.utf8) }
        }

        static func with(_ fields: [String: Any], kind: String = "updated") -> [String: Any] {
            C.event(kind, fields)
        }

        static func without(_ key: String, kind: String = "updated") -> [String: Any] {
            var event = C.event(kind)
            event[key] = nil
            return event
        }
    }

    static let rules: [Rule] = [
        .raw("not JSON", "JSON", "{\"events\": ["),
        .raw("not an object", "object", "[]"),
        .raw("no events", "'events'", "{}"),
        .raw("events not an array", "'events'", "{\"events\": {}}"),
        .raw("no event at all", "1 to 500", "{\"events\": []}"),
        Rule(description: "501 events", reason: "1 to 500") { try C.body((0...500).map { _ in C.event("deferred") }) },
        Rule(description: "an event that is not an object", reason: "object") {
            Data("{\"events\":[".utf8) + (try JSONSerialization.data(withJSONObject: C.event("deferred"))) + Data(",42]}".utf8)
        },
        .event("no id", "'id'") { Rule.without("id") },
        .event("id of 7 characters", "'id'") { Rule.with(["id": "abcdef1"]) },
        .event("id of 65 characters", "'id'") { Rule.with(["id": String(repeating: "a", count: 65)]) },
        .event("id with a character outside the set", "'id'") { Rule.with(["id": "abcdefgh.1"]) },
        .event("id a number", "'id'") { Rule.with(["id": 123456789]) },
        .event("no time", "'time'") { Rule.without("time") },
        .event("time not RFC 3339", "'time'") { Rule.with(["time": "2026-11-22 21:30:00"]) },
        .event("time 31 February", "'time'") { Rule.with(["time": "2026-02-31T00:00:00Z"]) },
        .event("no device", "'device'") { Rule.without("device") },
        .event("empty device", "'device'") { Rule.with(["device": ""]) },
        .event("device over 256 bytes", "'device'") { Rule.with(["device": String(repeating: "é", count: 129)]) },
        .event("no app", "'app'") { Rule.without("app") },
        .event("app not an app name", "'app'") { Rule.with(["app": "Fleet App"]) },
        .event("no event", "'event'") { Rule.without("event") },
        .event("unknown event", "'event'") { Rule.with(["event": "exploded"]) },
        .event("version a number", "'version'") { Rule.with(["version": 2]) },
        .event("version over 256 bytes", "'version'") { Rule.with(["version": String(repeating: "1", count: 257)]) },
        .event("previousVersion an array", "'previousVersion'") { Rule.with(["previousVersion": ["1.0.0"]]) },
        .event("via neither patch nor full", "'via'") { Rule.with(["via": "torrent"]) },
        .event("no bytes", "'bytes'") { Rule.without("bytes") },
        .event("negative bytes", "'bytes'") { Rule.with(["bytes": -1]) },
        .event("fractional bytes", "'bytes'") { Rule.with(["bytes": 1.5]) },
        .event("bytes a string", "'bytes'") { Rule.with(["bytes": "10"]) },
        .event("bytes a boolean", "'bytes'") { Rule.with(["bytes": true]) },
        .event("bytes over 2^63", "'bytes'") { Rule.with(["bytes": 1e19]) },
        .event("negative fullSize", "'fullSize'") { Rule.with(["fullSize": -5]) },
        .event("no durationMs", "'durationMs'") { Rule.without("durationMs") },
        .event("errorCode a number", "'errorCode'") { Rule.with(["errorCode": 7]) },
        .event("message over 1024 bytes", "'message'") { Rule.with(["message": String(repeating: "m", count: 1025)]) },
        .event("usage without offlineHits", "'offlineHits'") { Rule.without("offlineHits", kind: "usage") },
        .event("usage without periodSeconds", "'periodSeconds'") { Rule.without("periodSeconds", kind: "usage") },
        .event("usage with periodSeconds 0", "'periodSeconds'") { Rule.with(["periodSeconds": 0], kind: "usage") },
        .event("usage with fallbacks an array", "'fallbacks'") { Rule.with(["fallbacks": [1, 2]], kind: "usage") },
        .event("usage with a negative fallback count", "'fallbacks'") { Rule.with(["fallbacks": ["missing-file": -1]], kind: "usage") },
        .event("usage with a fractional fallback count", "'fallbacks'") { Rule.with(["fallbacks": ["missing-file": 0.5]], kind: "usage") },
    ]

    @Test("a batch with one event that breaks a rule is refused whole with 400 and the rule")
    func refused() async throws {
        // One collector for every rule (each is refused whole, so none leaves anything
        // behind for the next), not one database per rule created all at once.
        try await withServer { base in
            for rule in Self.rules {
                let answer = try await C.post(base, try rule.body())
                #expect(answer.status == 400, "\(rule): \(answer.body)")
                #expect(answer.body.contains(rule.reason), "\(rule): \(answer.body)")
                #expect(!answer.body.dropLast().contains("\n"), "\(rule): one line: \(answer.body)")
                // Nothing of the batch was stored, not even its valid first event.
                #expect((try await C.stats(base))["events"] as? Int == 0, "\(rule)")
                #expect(
                    try await C.metrics(base).value("offline_server_report_events_total", ["app": "fleet", "event": "updated"]) == nil,
                    "\(rule)")
            }
        }
    }

    @Test("a body over 1 MiB is refused with 413, with a length or chunked", arguments: [false, true])
    func overCap(chunked: Bool) async throws {
        try await withServer { base in
            // Valid all the way (an unknown top-level key is ignored), so only the size can refuse it.
            var object: [String: Any] = ["events": [C.event("deferred")]]
            object["padding"] = String(repeating: "x", count: 1 << 20)
            let body = try JSONSerialization.data(withJSONObject: object)
            #expect(body.count > 1 << 20)
            let answer = try await C.post(base, body, headers: chunked ? ["Transfer-Encoding: chunked"] : [])
            #expect(answer.status == 413, "\(answer.body)")
            #expect((try await C.stats(base))["events"] as? Int == 0)
            // The server still takes the next batch.
            #expect(try await C.post(base, try C.body([C.event("deferred")])).receipt?.accepted == 1)
        }
    }

    @Test("an id sent again is a duplicate: counted in the receipt, stored and counted once")
    func duplicates() async throws {
        try await withServer { base in
            let first = [
                C.event("updated", device: "d1", ["via": "patch", "bytes": 10, "fullSize": 100]),
                C.event("failed", device: "d2", ["errorCode": "timeout", "bytes": 5]),
            ]
            #expect(try await C.post(base, try C.body(first)).receipt?.accepted == 2)
            let fresh = C.event("updated", device: "d3", ["via": "full", "bytes": 100])
            // The same two again, a new one, and the new one twice within the batch.
            let again = try await C.post(base, try C.body(first + [fresh, fresh]))
            #expect(again.status == 200)
            #expect(again.receipt?.accepted == 1)
            #expect(again.receipt?.duplicates == 3)
            let stats = try await C.stats(base)
            #expect(stats["events"] as? Int == 3)
            #expect(stats["bytesDownloaded"] as? Int == 115)
            #expect(stats["bytesSaved"] as? Int == 90)
            let v2 = try #require(C.version(stats, "2.0.0"))
            #expect(v2["updated"] as? Int == 2)
            #expect(v2["failed"] as? Int == 1)
            let metrics = try await C.metrics(base)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "patch"]) == 1)
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "timeout"]) == 1)
            #expect(metrics.value("offline_server_report_downloaded_bytes_total", ["app": "fleet"]) == 115)
        }
    }

    @Test("devices count for the version of their latest updated event, by arrival, not by time")
    func devicesByLatestUpdate() async throws {
        try await withServer { base in
            let events = [
                // d1 went 2.0.0 then 3.0.0, sent in that order, its clock set back between;
                // d2 only 2.0.0; d3's 3.0.0 failed.
                C.event("updated", device: "d1", version: "2.0.0", ["time": "2026-11-22T10:00:00.500Z", "via": "full"]),
                C.event("updated", device: "d1", version: "3.0.0", ["time": "2026-11-22T10:00:00Z", "via": "full"]),
                C.event("updated", device: "d2", version: "2.0.0", ["time": "2026-11-22T11:00:00+01:00", "via": "full"]),
                C.event("updated", device: "d3", version: "2.0.0", ["time": "2026-11-22T09:00:00Z", "via": "full"]),
                C.event("failed", device: "d3", version: "3.0.0", ["time": "2026-11-22T12:00:00Z", "errorCode": "disk-full"]),
            ]
            #expect(try await C.post(base, try C.body(events)).receipt?.accepted == 5)
            let stats = try await C.stats(base)
            #expect(C.version(stats, "3.0.0")?["devices"] as? Int == 1)
            #expect(C.version(stats, "3.0.0")?["successRate"] as? Double == 0.5)
            #expect(C.version(stats, "2.0.0")?["devices"] as? Int == 2)
            #expect(C.version(stats, "2.0.0")?["successRate"] as? Double == 1)
        }
    }

    @Test("/report takes POST only, /stats needs a valid app; reports off answers 404")
    func routes() async throws {
        try await withServer { base in
            #expect(try await PublishHTTP.fetch(base + "/report").status == 405)
            #expect(try await PublishHTTP.fetch(base + "/stats").status == 400)
            #expect(try await PublishHTTP.fetch(base + "/stats?app=Not%20An%20App").status == 400)
            let empty = try await C.stats(base, app: "never-reported")
            #expect(empty["events"] as? Int == 0)
            #expect((empty["versions"] as? [Any])?.isEmpty == true)
            #expect(empty["offlineHitRatio"] is NSNull)
        }
        let directory = try PublishFixtures.temporaryDirectory("fleet-off")
        defer { PublishFixtures.cleanUp(directory) }
        let server = try await ReferenceServer(configuration: .init(directory: directory, port: 0)).start()
        let off = try await C.post(server.baseURL, try C.body([C.event("deferred")]))
        let stats = try await PublishHTTP.fetch(server.baseURL + "/stats?app=fleet").status
        let metrics = String(decoding: try await PublishHTTP.fetch(server.baseURL + "/metrics").body, as: UTF8.self)
        await server.stop()
        #expect(off.status == 404)
        #expect(stats == 404)
        #expect(!metrics.contains("offline_server_report_"))
    }
}
