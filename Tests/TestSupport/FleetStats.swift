import Foundation
import Testing

/// A fleet-report collector's answers read back (`offline-server`'s `GET /stats?app=` and
/// `GET /metrics`), for the tests that post to one and the tests that run devices against one.
package enum FleetStats {
    /// `GET /stats?app=NAME`, parsed.
    package static func stats(_ base: String, app: String) async throws -> [String: Any] {
        let response = try await PublishHTTP.fetch(base + "/stats?app=\(app)")
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/json")
        return try #require(try JSONSerialization.jsonObject(with: response.body) as? [String: Any])
    }

    /// `GET /stats?app=NAME` as sent (to compare two servers' answers byte for byte).
    package static func statsText(_ base: String, app: String) async throws -> String {
        String(decoding: try await PublishHTTP.fetch(base + "/stats?app=\(app)").body, as: UTF8.self)
    }

    /// The entry of `version` in a `/stats` answer.
    package static func version(_ stats: [String: Any], _ version: String) -> [String: Any]? {
        (stats["versions"] as? [[String: Any]])?.first { $0["version"] as? String == version }
    }

    /// `/metrics`, parsed strictly.
    package static func metrics(_ base: String) async throws -> PrometheusExposition {
        let response = try await PublishHTTP.fetch(base + "/metrics")
        #expect(response.status == 200)
        return try PrometheusExposition(parsing: String(decoding: response.body, as: UTF8.self))
    }

    /// Only the fleet families of `/metrics` (the server's own request counters change with every scrape).
    package static func fleetMetricsText(_ base: String) async throws -> String {
        let text = String(decoding: try await PublishHTTP.fetch(base + "/metrics").body, as: UTF8.self)
        return text.split(separator: "\n").filter { $0.contains("offline_server_report_") }.joined(separator: "\n")
    }
}
