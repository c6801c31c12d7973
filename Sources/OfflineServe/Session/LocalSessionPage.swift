import Crypto
import FoundationEssentials
import Hummingbird
import OfflineAgent

/// The session restore page of the loopback server (`GET /session/restore`, see
/// `LocalServer` and `SessionHistory`).
///
/// The page's only script is static, so a strict Content-Security-Policy can allow
/// exactly it by hash; the history comes as data in a
/// `<script type="application/json">` block that the script parses.
enum LocalSessionPage {
    /// Rebuilds the back/forward list on local `/session/item` URLs, then loads the
    /// current entry. Every entry's URL redirects to its page, so loading (or
    /// reloading) an entry is all it takes.
    static let script = """
        (function () {
          "use strict";
          var session = JSON.parse(document.getElementById("session").textContent);
          var items = session.items;
          history.replaceState(null, "", items[0]);
          for (var i = 1; i < items.length; i++) history.pushState(null, "", items[i]);
          // Back to an entry of this document from the back/forward cache: load that entry.
          addEventListener("pageshow", function (event) { if (event.persisted) location.reload(); });
          if (session.currentPage === 0) { location.reload(); return; }
          addEventListener("popstate", function () { location.reload(); }, { once: true });
          history.go(session.currentPage);
        })();
        """

    /// No source but the script above: nothing else runs, loads, frames the page or is submitted.
    static let contentSecurityPolicy: String = {
        let hash = Data(SHA256.hash(data: Data(script.utf8))).base64EncodedString()
        return "default-src 'none'; script-src 'sha256-\(hash)'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }()

    /// The page restoring `history`.
    static func html(_ history: SessionHistory) -> String {
        """
        <!DOCTYPE html>
        <html><head><meta charset="utf-8"><title>Restoring session</title>
        <script type="application/json" id="session">\(data(history))</script>
        <script>\(script)</script>
        </head><body></body></html>

        """
    }

    /// `{"currentPage":-1,"items":["/session/item?url=…",…]}`, safe inside a `<script>`
    /// element (the paths are percent-encoded, and `scriptSafe` holds anyway).
    static func data(_ history: SessionHistory) -> String {
        struct Payload: Encodable {
            var currentPage: Int
            var items: [String]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let value = Payload(currentPage: history.currentPage, items: history.entries.map(SessionHistory.itemPath(for:)))
        // Strings and integers always encode.
        return scriptSafe(String(decoding: try! encoder.encode(value), as: UTF8.self))
    }

    /// JSON with `<`, `>`, `&`, U+2028 and U+2029 written as `\u` escapes: the same
    /// value, but nothing in it can close the `<script>` element or start markup.
    static func scriptSafe(_ json: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(json.utf8.count)
        for scalar in json.unicodeScalars {
            switch scalar {
            case "<", ">", "&", "\u{2028}", "\u{2029}":
                let hex = String(scalar.value, radix: 16)
                escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }
}
