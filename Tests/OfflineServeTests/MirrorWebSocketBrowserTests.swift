import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport

/// Headless Chromium opening a WebSocket on its own mirror origin (`docs/PROTOCOL.md`,
/// "Mirrored origins", "WebSockets"): the page comes from the package, its
/// `new WebSocket('ws://' + location.host + '/ws')` reaches the real origin through `serve`.
@Suite("Mirror WebSocket browser", .serialized)
struct MirrorWebSocketBrowserTests {
    /// Sends a message, shows the echo and the chosen protocol, then has the origin close
    /// with 4003 and shows the close the page got. Until the WebSocket has closed, one
    /// request the origin answers after 1 s is always pending: `--virtual-time-budget`
    /// runs only while none is, and a WebSocket's frames are not requests (Chromium's
    /// own `timeout 60` bounds the wait).
    static let pageHTML = """
        <!doctype html><html><head><meta charset="utf-8"></head><body><div id="out">waiting</div><script>
        var out = document.getElementById("out"), done = false;
        (function hold() { if (!done) fetch("/slow").then(hold, hold); })();
        var ws = new WebSocket("ws://" + location.host + "/ws?from=page", ["chat.v1", "chat.v2"]);
        ws.onopen = function () { ws.send("hello from the page"); };
        ws.onmessage = function (e) {
          out.textContent = "echo:" + e.data + ";protocol:" + ws.protocol;
          ws.send("close-me:4003:done");
        };
        ws.onclose = function (e) { out.textContent += ";closed:" + e.code + ":" + e.reason; done = true; };
        ws.onerror = function () { out.textContent += ";error"; };
        </script></body></html>
        """

    @Test(
        "a page from the package opens a WebSocket on its mirror origin: the echo, the subprotocol and the origin's close reach it",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func pageWebSocket() async throws {
        let origin = try await WebSocketEchoOrigin.start()
        do {
            let f = LocalStoreFixture()
            try f.add("live", version: "1.0.0", fixture: nil, files: ["index.html": Array(Self.pageHTML.utf8)],
                      whitelist: ["http://127.0.0.1:\(origin.port)/"])
            try await withLocalServer(f, deviceID: "browser") { server in
                let mirror = try #require(server.mirrorURL(for: URL(string: "http://127.0.0.1:\(origin.port)/")!))
                let dom = try await BrowserTests.dumpDOM(mirror)
                #expect(dom.contains("echo:hello from the page;protocol:chat.v2;closed:4003:done"), "\(dom.prefix(2000))")
                #expect(origin.entries.contains("handshake /ws?from=page"), "\(origin.entries)")
                #expect(origin.handshakeHeader("Origin") == ["http://127.0.0.1:\(origin.port)"])
            }
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }
}
