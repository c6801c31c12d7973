import Hummingbird
import NIOCore
import OfflineHTTP

/// What `GET /open` answers a browser navigation whose page is on a mirror host (see
/// `LocalServer`): a `200` document that loads the mirror URL itself, instead of a `302`.
///
/// WebKit (WebKitGTK, WPE, Safari) empties `serverTiming` for a document reached through
/// a cross-origin redirect, and `127.0.0.1` → mirror host is one: behind a `302` the page
/// could not read the version it runs (docs/HOST-APPS.md). A navigation this document
/// starts is a new one, whose own response the page reads in every engine.
///
/// It has no script: a `<meta http-equiv="refresh">` with no delay (which replaces the
/// history entry, so Back does not land on `/open` again) and a link for an engine
/// that does not refresh. A strict Content-Security-Policy lets nothing else load or run.
enum LocalOpenPage {
    /// Nothing runs, loads, frames the page or is submitted.
    static let contentSecurityPolicy = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The page loading `location` (an absolute URL).
    static func html(_ location: String) -> String {
        // The URL comes from `/open`'s query (any page may link to it): nothing in it may
        // end the attribute or start markup.
        let url = HTMLText.escape(location)
        return """
            <!DOCTYPE html>
            <html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=\(url)"><title>Opening</title>
            </head><body><a href="\(url)">Open</a></body></html>

            """
    }

    /// The answer to `GET` (or `HEAD`, `head`) of `/open` loading `location`.
    static func response(_ location: String, head: Bool) -> Response {
        let buffer = ByteBuffer(string: html(location))
        let headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8",
            .contentLength: String(buffer.readableBytes),
            // Each load is one open (a launch may be counted): never replayed from a cache.
            .cacheControl: "no-store",
            .contentSecurityPolicy: contentSecurityPolicy,
            // The page loads as a 302 would have loaded it: without this URL as its referrer.
            LocalServerResponder.referrerPolicy: "no-referrer",
        ]
        return Response(status: .ok, headers: headers, body: head ? ResponseBody() : ResponseBody(byteBuffer: buffer))
    }
}
