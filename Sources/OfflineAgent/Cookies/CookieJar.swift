import FoundationEssentials
import Synchronization

/// The cookies of one profile: what the agent's requests carry and what their
/// responses set (RFC 6265), optionally backed by the profile's file.
///
/// Session cookies live as long as the jar; persistent ones are written to `file`
/// (atomically, mode 0600) whenever a response changes them, and expired cookies are
/// neither sent nor written. Safe to share between concurrent requests.
public final class CookieJar: Sendable {
    /// At most this many cookies in all and per domain (RFC 6265 §6.1's minimums);
    /// the oldest go first.
    public static let maxCookies = 3000
    /// At most this many cookies per domain.
    public static let maxCookiesPerDomain = 50

    /// Where persistent cookies are kept; nil for a jar in memory only.
    public let file: String?
    /// In creation order, which breaks ties when ordering the `Cookie` header.
    private let cookies: Mutex<[Cookie]>

    /// A jar holding `cookies`, written to `file` when one is given.
    public init(cookies: [Cookie] = [], file: String? = nil) {
        self.file = file
        self.cookies = Mutex(cookies)
    }

    /// The cookies that have not expired, oldest first.
    public func all(now: Date = Date()) -> [Cookie] {
        cookies.withLock { $0.filter { !$0.isExpired(at: now) } }
    }

    /// The `Cookie` header for a request to `url` (RFC 6265 §5.4): longer paths first,
    /// then older cookies first; nil when no cookie applies.
    public func header(for url: URL, now: Date = Date()) -> String? {
        guard let request = CookieURL(url) else { return nil }
        let matching = all(now: now).filter { $0.matches(request) }
        guard !matching.isEmpty else { return nil }
        // A stable sort keeps creation order among equal path lengths.
        let ordered = matching.enumerated().sorted {
            ($0.element.path.utf8.count, -$0.offset) > ($1.element.path.utf8.count, -$1.offset)
        }
        return ordered.map { "\($0.element.name)=\($0.element.value)" }.joined(separator: "; ")
    }

    /// Takes the `Set-Cookie` headers of a response to `url`.
    ///
    /// - Returns: whether the persistent cookies changed (and `save` has work to do).
    @discardableResult
    public func store(setCookie headers: [String], from url: URL, now: Date = Date()) -> Bool {
        let parsed = headers.compactMap { SetCookie.parse($0, from: url, now: now) }
        guard !parsed.isEmpty else { return false }
        return cookies.withLock { list in
            let before = Self.persistent(list, now: now)
            for cookie in parsed { Self.insert(cookie, into: &list, now: now) }
            return Self.persistent(list, now: now) != before
        }
    }

    /// Writes the persistent, unexpired cookies to `file`, atomically, readable by the
    /// owner only. Does nothing for a jar without a file.
    public func save(now: Date = Date()) throws {
        guard let file else { return }
        let kept = cookies.withLock { Self.persistent($0, now: now) }
        try CookieProfile.write(kept, to: file)
    }

    // MARK: - Storage model (RFC 6265 §5.3 steps 11–12)

    private static func insert(_ cookie: Cookie, into list: inout [Cookie], now: Date) {
        var cookie = cookie
        if let old = list.firstIndex(where: cookie.replaces) {
            // The replacement keeps the old creation time, and so its place in the order.
            cookie.created = list[old].created
            if cookie.isExpired(at: now) { list.remove(at: old) } else { list[old] = cookie }
        } else if !cookie.isExpired(at: now) {
            list.append(cookie)
        }
        list.removeAll { $0.isExpired(at: now) }
        if list.count(where: { $0.domain == cookie.domain }) > maxCookiesPerDomain,
           let oldest = list.firstIndex(where: { $0.domain == cookie.domain }) {
            list.remove(at: oldest)
        }
        if list.count > maxCookies { list.removeFirst(list.count - maxCookies) }
    }

    private static func persistent(_ list: [Cookie], now: Date) -> [Cookie] {
        list.filter { $0.isPersistent && !$0.isExpired(at: now) }
    }
}
