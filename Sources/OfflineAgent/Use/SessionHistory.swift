import FoundationEssentials

/// A web view's back/forward list, to be rebuilt by the loopback server's
/// `/session/restore` page (`offline-agent serve`).
///
/// A web view's history cannot be set directly. The restore page rebuilds it with
/// `history.replaceState` / `history.pushState` on local `/session/item?url=…` URLs,
/// then moves to the current entry; each of those URLs redirects to its page (the
/// offline copy when there is one), like `/open`.
///
/// The JSON form, also the `history` query parameter of `/session/restore`:
/// `{"history": ["https://…", …], "currentPage": -1}` — 1 to 50 absolute `http` or
/// `https` URLs, oldest first, and the current entry as an offset from the last one
/// (0 the last entry, -1 the one before it, …; 0 when absent).
public struct SessionHistory: Sendable, Hashable, Codable {
    /// The most entries a history may have.
    public static let maxEntries = 50
    /// The longest restore URL made: the loopback server (SwiftNIO's HTTP parser)
    /// refuses a request head over 80 KiB, so a longer URL could never load.
    public static let maxRestoreURLBytes = 64 * 1024

    /// The pages of the back/forward list, oldest first.
    public let entries: [URL]
    /// The current entry as an offset from the last one: 0 is the last entry, -1 the
    /// one before it, down to `-(entries.count - 1)`.
    public let currentPage: Int

    /// The index in `entries` of the current entry.
    public var currentIndex: Int { entries.count - 1 + currentPage }

    /// Checks and keeps a history.
    ///
    /// - Throws: `OfflineAgentError(.usage)` for no entry or more than `maxEntries`, an
    ///   entry that is not an absolute `http` or `https` URL with a host, or a
    ///   `currentPage` outside `-(entries.count - 1)...0`.
    public init(entries: [URL], currentPage: Int = 0) throws {
        guard !entries.isEmpty else {
            throw OfflineAgentError(.usage, "session history is empty; it needs at least 1 entry")
        }
        guard entries.count <= Self.maxEntries else {
            throw OfflineAgentError(.usage, "session history has \(entries.count) entries; at most \(Self.maxEntries) are allowed")
        }
        if let bad = entries.firstIndex(where: { !Self.isWebURL($0) }) {
            throw OfflineAgentError(.usage, "history[\(bad)] is not an absolute http or https URL")
        }
        guard (-(entries.count - 1)...0).contains(currentPage) else {
            throw OfflineAgentError(
                .usage,
                "'currentPage' \(currentPage) is outside \(-(entries.count - 1))...0 (0 is the last entry, -1 the one before it)")
        }
        self.entries = entries
        self.currentPage = currentPage
    }

    /// Reads and checks the JSON form (see the type's documentation).
    ///
    /// - Throws: `OfflineAgentError(.usage)` with a one-line reason.
    public init(json: Data) throws {
        do {
            self = try JSONDecoder().decode(Self.self, from: json)
        } catch let error as OfflineAgentError {
            throw error
        } catch {
            throw OfflineAgentError(.usage, "session history is not valid JSON")
        }
    }

    /// The JSON form: `{"currentPage":-1,"history":["https://…",…]}` (keys sorted, slashes unescaped).
    public var json: Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding strings and an integer cannot fail.
        return try! encoder.encode(self)
    }

    /// The URL a host app loads in a fresh web view to restore this history through
    /// the loopback server at `host`:`port`:
    /// `http://127.0.0.1:PORT/session/restore?history=<percent-encoded JSON>`.
    ///
    /// - Throws: `OfflineAgentError(.usage)` for a port outside 1…65535, a host that
    ///   does not fit in a URL, or a URL longer than `maxRestoreURLBytes`.
    public func restoreURL(host: String = "127.0.0.1", port: Int) throws -> URL {
        guard (1...65535).contains(port) else {
            throw OfflineAgentError(.usage, "port \(port) is outside 1...65535")
        }
        let query = Self.queryEncoded(String(decoding: json, as: UTF8.self))
        let authority = WebAddress.authority(host: host, port: port)
        guard !host.isEmpty, let url = URL(string: "http://\(authority)/session/restore?history=\(query)"),
              url.host?.isEmpty == false else {
            throw OfflineAgentError(.usage, "invalid host '\(host)'")
        }
        let length = url.absoluteString.utf8.count
        guard length <= Self.maxRestoreURLBytes else {
            throw OfflineAgentError(
                .usage, "the restore URL would be \(length) bytes, over the \(Self.maxRestoreURLBytes) the server accepts; restore fewer or shorter URLs")
        }
        return url
    }

    /// The loopback server's path that redirects to `url` (one restored entry):
    /// `/session/item?url=<percent-encoded URL>`.
    public static func itemPath(for url: URL) -> String {
        "/session/item?url=\(queryEncoded(url.absoluteString))"
    }

    /// An absolute `http` or `https` URL with a host: what may be restored (never
    /// `javascript:`, `file:`, `data:` or a relative reference).
    public static func isWebURL(_ url: URL) -> Bool {
        WebAddress.isAbsolute(url)
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters, so the text is
    /// one query parameter value (`&`, `=`, `+`, `#` included) and safe inside HTML.
    static func queryEncoded(_ text: String) -> String {
        text.percentEncodedUnreserved
    }

    // MARK: Codable

    private enum CodingKeys: String, CodingKey {
        case history, currentPage
    }

    /// Decodes the JSON form and checks it like `init(entries:currentPage:)`.
    public init(from decoder: any Decoder) throws {
        let container: KeyedDecodingContainer<CodingKeys>
        do {
            container = try decoder.container(keyedBy: CodingKeys.self)
        } catch {
            throw OfflineAgentError(.usage, "session history must be a JSON object {\"history\": [URL, …], \"currentPage\": 0 or less}")
        }
        let strings: [String]
        do {
            strings = try container.decode([String].self, forKey: .history)
        } catch {
            throw OfflineAgentError(.usage, "session history needs 'history', an array of URL strings")
        }
        let currentPage: Int
        do {
            currentPage = try container.decodeIfPresent(Int.self, forKey: .currentPage) ?? 0
        } catch {
            throw OfflineAgentError(.usage, "'currentPage' must be an integer")
        }
        // Count first: a huge list is refused before its URLs are parsed.
        guard strings.count <= Self.maxEntries else {
            throw OfflineAgentError(.usage, "session history has \(strings.count) entries; at most \(Self.maxEntries) are allowed")
        }
        var entries: [URL] = []
        for (index, string) in strings.enumerated() {
            guard let url = URL(string: string) else {
                throw OfflineAgentError(.usage, "history[\(index)] is not an absolute http or https URL")
            }
            entries.append(url)
        }
        try self.init(entries: entries, currentPage: currentPage)
    }

    /// Encodes the JSON form, URLs as their `absoluteString`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entries.map(\.absoluteString), forKey: .history)
        try container.encode(currentPage, forKey: .currentPage)
    }
}
