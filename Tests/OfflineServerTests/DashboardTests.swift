import Foundation
import OfflineAgent
import OfflinePublish
import OfflineServer
import TestSupport
import Testing

/// `GET /dashboard` in a real browser: headless Chromium renders the page of a fleet
/// whose staged version halted itself; the DOM carries the figures `/stats` gives, the
/// adoption chart has a line per version, the halt is shown with its reason, and the
/// page loads nothing from anywhere (no script, font or stylesheet).
@Suite("Dashboard", .serialized)
struct DashboardTests {
    typealias C = FleetReportClient

    static let chromium: String? = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Chromium on `url`, headless, with `action` (`--dump-dom` or `--screenshot=PATH`); bounded by `timeout`.
    static func chromium(_ url: String, _ action: String) async throws -> CLI.Result {
        let chromium = try #require(chromium)
        let profile = TemporaryDirectory("chromium")
        return try await CLI.run([
            "300", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--user-data-dir=\(profile.path)", "--hide-scrollbars",
            "--window-size=1100,1000", "--virtual-time-budget=3000", action, url,
        ], executable: "/usr/bin/timeout")
    }

    /// Text as an HTML serializer writes it between tags.
    static func escapeText(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    /// The value of `name="…"` in one tag's text.
    static func attribute(_ name: String, in tag: Substring) -> String? {
        guard let start = tag.range(of: " \(name)=\"") else { return nil }
        let rest = tag[start.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    /// Every start tag of `element` whose attributes include `marker`.
    static func tags(_ html: String, _ element: String, with marker: String) -> [Substring] {
        html.components(separatedBy: "<\(element) ").dropFirst().compactMap { piece in
            guard let end = piece.firstIndex(of: ">") else { return nil }
            let tag = Substring(" " + piece[..<end])
            return tag.contains(marker) ? tag : nil
        }
    }

    @Test(
        "Chromium renders the adoption curve and the halt; the DOM's figures are /stats's",
        .enabled(if: DashboardTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func rendersFleet() async throws {
        let dir = try PublishFixtures.temporaryDirectory("dashboard")
        defer { PublishFixtures.cleanUp(dir) }
        let key = SigningKey.generate()
        try AutoHaltTests.publishStaged(dir, key: key, stage: 50)
        var configuration = ReferenceServer.Configuration(directory: dir, port: 0, signingKey: key, reportsDatabase: dir + "/reports.sqlite")
        configuration.autoHalt = try AutoHaltRules(parsing: "failure-rate>30%,min-devices=10")
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let base = server.baseURL

        // 40 devices reach 1.0.0 over a few moments, then those in the stage try 2.0.0:
        // most install it (by patch), a growing share fail, and the rollout halts itself.
        let inside = AutoHaltTests.devices("dash-in", inStage: true, stage: 50, count: 24)
        let outside = AutoHaltTests.devices("dash-out", inStage: false, stage: 50, count: 16)
        for wave in 0..<4 {
            let devices = (inside + outside).enumerated().filter { $0.offset % 4 == wave }.map(\.element)
            let events = devices.map { C.event("updated", device: $0, version: "1.0.0", ["via": "full", "bytes": 4000]) }
                + devices.map { C.event("usage", device: $0, version: "1.0.0", ["offlineHits": 9, "fallbacks": ["missing-file": 1]]) }
            #expect(try await C.post(base, try C.body(events)).receipt?.accepted == events.count)
            try await Task.sleep(for: .milliseconds(120))
        }
        for (index, device) in inside.enumerated() {
            let event = index % 3 == 2
                ? C.event("failed", device: device, version: "2.0.0", ["errorCode": index % 2 == 0 ? "hash-mismatch" : "network", "previousVersion": "1.0.0"])
                : C.event("updated", device: device, version: "2.0.0", ["via": "patch", "bytes": 300, "fullSize": 4000, "previousVersion": "1.0.0"])
            #expect(try await C.post(base, try C.body([event])).status == 200)
            if index % 4 == 3 { try await Task.sleep(for: .milliseconds(60)) }
        }
        let rollback = C.event("rolled-back", device: inside[0], version: "1.0.0", ["previousVersion": "2.0.0"])
        #expect(try await C.post(base, try C.body([rollback])).status == 200)
        let stats = try await C.stats(base)
        let v2 = try #require(C.version(stats, "2.0.0"))
        #expect(v2["halted"] as? Bool == true, "the fleet halted 2.0.0: \(v2)")

        // The raw page: no script, no external anything, a CSP that forbids loading, a refresh of 60 s.
        let raw = try await PublishHTTP.fetch(base + "/dashboard")
        #expect(raw.status == 200)
        #expect(raw.header("Content-Type") == "text/html; charset=utf-8")
        #expect(raw.header("Content-Security-Policy")?.hasPrefix("default-src 'none'") == true)
        let page = String(decoding: raw.body, as: UTF8.self)
        for forbidden in ["<script", "<link", "@import", "url(", "src=", "@font-face"] {
            #expect(!page.lowercased().contains(forbidden), "\(forbidden)")
        }
        #expect(page.contains("<meta http-equiv=\"refresh\" content=\"60\">"))

        // The DOM as Chromium built it carries /stats's figures.
        let dumped = try await Self.chromium(base + "/dashboard?app=fleet", "--dump-dom")
        #expect(dumped.status == 0, "chromium: \(dumped.stderr.suffix(2000))")
        let dom = dumped.stdout
        let section = try #require(Self.tags(dom, "section", with: "data-app=\"fleet\"").first)
        #expect(Self.attribute("data-events", in: section) == "\(stats["events"] as? Int ?? -1)")
        #expect(Self.attribute("data-devices", in: section) == "\(stats["devices"] as? Int ?? -1)")
        #expect(Self.attribute("data-bytes-saved", in: section) == "\(stats["bytesSaved"] as? Int ?? -1)")
        #expect(Self.attribute("data-rollout", in: section) == "\(stats["rollout"] as? Int ?? -1)")
        #expect(Double(Self.attribute("data-offline-hit-ratio", in: section) ?? "") == stats["offlineHitRatio"] as? Double)
        let versions = try #require(stats["versions"] as? [[String: Any]])
        let rows = Self.tags(dom, "tr", with: "data-version=")
        #expect(rows.map { Self.attribute("data-version", in: $0) } == versions.map { $0["version"] as? String })
        for (row, version) in zip(rows, versions) {
            for (attribute, key) in [("data-devices", "devices"), ("data-updated", "updated"), ("data-failed", "failed"),
                                     ("data-rolled-back", "rolledBack"), ("data-bytes-saved", "bytesSaved")] {
                #expect(Self.attribute(attribute, in: row) == "\(version[key] as? Int ?? -1)", "\(attribute) of \(version["version"] ?? "")")
            }
            #expect(Self.attribute("data-halted", in: row) == "\(version["halted"] as? Bool ?? false)")
            #expect(Double(Self.attribute("data-success-rate", in: row) ?? "") == version["successRate"] as? Double)
        }
        // The halt, with /stats's reason; a line per version ending at its devices now.
        let banner = try #require(Self.tags(dom, "p", with: "data-halted-version=\"2.0.0\"").first)
        #expect(banner.contains("class=\"halt\""))
        let reason = try #require(v2["reason"] as? String)
        #expect(dom.contains(Self.escapeText(reason)))
        let lines = Self.tags(dom, "polyline", with: "data-version=")
        #expect(Set(lines.compactMap { Self.attribute("data-version", in: $0) }) == ["1.0.0", "2.0.0"])
        for line in lines {
            let version = Self.attribute("data-version", in: line)!
            #expect(Self.attribute("data-last", in: line) == "\(C.version(stats, version)?["devices"] as? Int ?? -1)")
        }

        // The screenshot: kept under .build for a person to look at (and the report to show).
        let shot = Repo.root + "/.build/dashboard-screenshot.png"
        try? FileManager.default.removeItem(atPath: shot)
        let taken = try await Self.chromium(base + "/dashboard", "--screenshot=\(shot)")
        #expect(taken.status == 0, "chromium: \(taken.stderr.suffix(2000))")
        let png = try #require(FileManager.default.contents(atPath: shot))
        #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]))
        #expect(png.count > 20_000, "a page with a chart and tables, not a blank one: \(png.count) bytes")
    }
}
