import Foundation
import OfflineServer
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Row 3 of issue 38 in a real browser: a page of another origin, in headless Chromium,
/// tries every way a page may post without asking — `navigator.sendBeacon`, a `no-cors`
/// `fetch` with `text/plain`, an HTML form with `enctype="text/plain"` whose body is valid
/// JSON — and a JSON `fetch` that needs a CORS preflight. An open collector (no token:
/// the worst case) stores none of them.
@Suite("Fleet reports: a cross-site page cannot post a report")
struct ReportCrossSiteBrowserTests {
    typealias C = FleetReportClient

    /// The attacker's page, served on a port of its own (another origin than the collector's).
    static func page(collector: String) throws -> String {
        func body(_ device: String) throws -> String {
            String(decoding: try C.body([C.event("failed", device: device, version: "2.0.0")]), as: UTF8.self)
        }
        // The form's one field makes the text/plain body `{"events":[…],"x":"="}`: valid JSON.
        let formJSON = try body("form")
        let name = String(formJSON.dropLast()) + #","x":""#
        func attribute(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "'", with: "&#39;")
        }
        func literal(_ text: String) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
        }
        return """
            <!doctype html><html><body><div id="out">started</div>
            <iframe name="sink" style="display:none"></iframe>
            <form id="f" method="POST" action="\(collector)/report" enctype="text/plain" target="sink">
            <input type="hidden" name='\(attribute(name))' value='"}'></form>
            <script>
            const url = "\(collector)/report", results = [];
            (async () => {
              try { results.push("beacon-" + navigator.sendBeacon(url, new Blob([\(try literal(try body("beacon")))], {type: "text/plain"}))); }
              catch (e) { results.push("beacon-error"); }
              try { await fetch(url, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: \(try literal(try body("no-cors")))}); results.push("no-cors-sent"); }
              catch (e) { results.push("no-cors-error"); }
              try { const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: \(try literal(try body("cors")))}); results.push("cors-status-" + r.status); }
              catch (e) { results.push("cors-blocked"); }
              document.getElementById("f").submit();
              results.push("form-sent");
              document.getElementById("out").textContent = "done " + results.join(" ");
            })();
            </script></body></html>
            """
    }

    @Test(
        "sendBeacon, no-cors fetch, a text/plain form and a preflighted JSON fetch from another origin store nothing",
        .enabled(if: DashboardTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func crossSitePageStoresNothing() async throws {
        let dir = try PublishFixtures.temporaryDirectory("cross-site")
        defer { PublishFixtures.cleanUp(dir) }
        try await C.withServer(database: dir + "/reports.sqlite") { server in
            let html = Array(try Self.page(collector: server.baseURL).utf8)
            let attacker = try LoopbackListener()
            attacker.start { client in
                defer { close(client) }
                // Read the request head (the page is all this origin serves), then answer it.
                var head: [UInt8] = [], byte: UInt8 = 0
                while head.count < 65_536, recv(client, &byte, 1, 0) == 1 {
                    head.append(byte)
                    if head.suffix(4) == Array("\r\n\r\n".utf8) { break }
                }
                let response = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(html.count)\r\nConnection: close\r\n\r\n"
                _ = LoopbackSocket.sendAll(client, Array(response.utf8) + html)
            }
            defer { attacker.stop() }
            let dumped = try await DashboardTests.chromium("http://127.0.0.1:\(attacker.port)/", "--dump-dom")
            #expect(dumped.status == 0, "chromium: \(dumped.stderr.suffix(2000))")
            // The page ran every attempt; the preflighted one was blocked by the browser.
            #expect(dumped.stdout.contains("done ") && dumped.stdout.contains("form-sent"), "\(dumped.stdout.suffix(2000))")
            #expect(dumped.stdout.contains("cors-blocked"), "\(dumped.stdout.suffix(2000))")
            // The simple requests reached the collector and were refused for their type.
            let refused = try await C.metrics(server.baseURL).value("offline_server_errors_total", ["code": "415"]) ?? 0
            #expect(refused >= 2, "415 answers: \(refused); page: \(dumped.stdout.suffix(500))")
            #expect(try await C.stats(server.baseURL)["events"] as? Int == 0)
        }
    }
}
