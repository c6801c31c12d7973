import AsyncHTTPClient
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import NIOHTTP1

/// A GET with the agent's rules for redirects: at most `maxRedirects`, and never from
/// https to http (AsyncHTTPClient's own redirect handling allows that downgrade).
/// Every hop carries the cookies of `cookies` and stores what it sets.
struct HTTPFetcher: Sendable {
    let client: HTTPClient
    let settings: NetworkSettings
    let cookies: CookieJar?
    let logger: Logger

    init(settings: NetworkSettings, cookies: CookieJar? = nil, logger: Logger = Logger(label: "offline-agent")) {
        self.cookies = cookies
        self.logger = logger
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .init(settings.connectTimeout), read: .init(settings.readTimeout)))
        configuration.httpVersion = .http1Only
        // AsyncHTTPClient retries a failed connection (refused, unreachable) with backoff
        // until the connect timeout: a dead server would cost the whole timeout and hide
        // the reason behind a generic error. One attempt, and the real errno.
        configuration.connectionPool.retryConnectionEstablishment = false
        self.client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        self.settings = settings
    }

    func shutdown() async {
        try? await client.shutdown()
    }

    /// Sends a GET, following redirects; returns the final response (body not yet read) and its URL.
    func get(_ url: URL, headers: [(String, String)], phase: OfflineAgentError.Code, timeout: Duration = .seconds(86_400))
        async throws -> (response: HTTPClientResponse, url: URL)
    {
        var current = url
        let deadline = NIODeadline.now() + .init(timeout)
        for _ in 0...settings.maxRedirects {
            guard WebAddress.webScheme(current.scheme) != nil else {
                throw OfflineAgentError(phase, "unsupported URL scheme \(current.scheme ?? "none"): only http and https",
                                        cause: .protocolViolation, path: current.absoluteString)
            }
            var request = HTTPClientRequest(url: current.absoluteString)
            request.method = .GET
            request.headers.add(name: "User-Agent", value: AgentVersion.userAgent)
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            if let cookie = cookies?.header(for: current) { request.headers.add(name: "Cookie", value: cookie) }
            let response: HTTPClientResponse
            do {
                response = try await execute(request, deadline: deadline)
            } catch {
                throw Self.failure(error, phase: phase, url: current)
            }
            keepCookies(of: response, from: current)
            guard [301, 302, 303, 307, 308].contains(response.status.code) else { return (response, current) }
            current = try Self.redirectTarget(from: current, location: response.headers.first(name: "Location"), phase: phase)
        }
        throw OfflineAgentError(phase, "more than \(settings.maxRedirects) redirects", path: url.absoluteString)
    }

    /// A GET sent on a pooled keep-alive connection that the server closed meanwhile
    /// fails before any byte of an answer; like a browser, send it once more (on a new
    /// connection). GET is idempotent, and a second failure is reported as it is.
    private func execute(_ request: HTTPClientRequest, deadline: NIODeadline) async throws -> HTTPClientResponse {
        do {
            return try await client.execute(request, deadline: deadline)
        } catch where Self.isStaleConnection(error) {
            return try await client.execute(request, deadline: deadline)
        }
    }

    static func isStaleConnection(_ error: any Error) -> Bool {
        if let error = error as? ChannelError, error == .ioOnClosedChannel { return true }
        if let error = error as? HTTPClientError, error == .remoteConnectionClosed { return true }
        return false
    }

    /// Stores what a response sets, redirects included, and saves the jar when its
    /// persistent cookies changed; a jar that cannot be written costs a warning, not the sync.
    private func keepCookies(of response: HTTPClientResponse, from url: URL) {
        guard let cookies else { return }
        let setCookie = response.headers["Set-Cookie"]
        guard !setCookie.isEmpty, cookies.store(setCookie: setCookie, from: url) else { return }
        do { try cookies.save() } catch { logger.warning("cookies not saved: \(error)") }
    }

    /// Where a redirect leads; throws for a missing Location or an https → http downgrade.
    static func redirectTarget(from current: URL, location: String?, phase: OfflineAgentError.Code) throws -> URL {
        guard let location, let next = URL(string: location, relativeTo: current)?.absoluteURL else {
            throw OfflineAgentError(phase, "redirect without a usable Location", path: current.absoluteString)
        }
        if WebAddress.webScheme(current.scheme) == "https", WebAddress.webScheme(next.scheme) != "https" {
            throw OfflineAgentError(phase, "refusing redirect from https to \(next.scheme ?? "?")", path: next.absoluteString)
        }
        return next
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .readTimeout: return "read timed out"
            case .connectTimeout: return "connect timed out"
            case .deadlineExceeded: return "deadline exceeded"
            case .remoteConnectionClosed: return "connection closed by server"
            default: return "\(error)"
            }
        }
        if let errno = SocketErrno.code(in: error) { return String(cString: strerror(errno)) }
        return "\(error)"
    }

    /// One readable error for a transport failure: who refused or did not answer, with
    /// `.timeout` for an expired deadline and `.network` for an unreachable server.
    static func failure(_ error: any Error, phase: OfflineAgentError.Code, url: URL) -> OfflineAgentError {
        if let error = error as? OfflineAgentError { return error }
        let endpoint = WebAddress.endpoint(of: url)
        let path = url.absoluteString
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout:
                return OfflineAgentError(phase, "no connection to \(endpoint): connect timed out", cause: .network, path: path)
            case .readTimeout:
                return OfflineAgentError(phase, "\(endpoint) went silent: read timed out", cause: .timeout, path: path)
            case .deadlineExceeded:
                return OfflineAgentError(phase, "\(endpoint) did not answer within the deadline", cause: .timeout, path: path)
            case .remoteConnectionClosed:
                return OfflineAgentError(phase, "connection closed by \(endpoint)", cause: .network, path: path)
            default:
                break
            }
        }
        if isDNSFailure(error) {
            return OfflineAgentError(phase, "cannot resolve \(url.host ?? "?")", cause: .network, path: path)
        }
        switch SocketErrno.code(in: error) {
        case ECONNREFUSED?:
            return OfflineAgentError(phase, "connection refused by \(endpoint)", cause: .network, path: path)
        case ECONNRESET?, EPIPE?:
            return OfflineAgentError(phase, "connection reset by \(endpoint)", cause: .network, path: path)
        case ENETUNREACH?, EHOSTUNREACH?, EHOSTDOWN?, ENETDOWN?, EADDRNOTAVAIL?:
            return OfflineAgentError(phase, "\(endpoint) is unreachable", cause: .network, path: path)
        case ETIMEDOUT?:
            return OfflineAgentError(phase, "no connection to \(endpoint): connect timed out", cause: .network, path: path)
        case let code?:
            return OfflineAgentError(phase, "request to \(endpoint) failed: \(String(cString: strerror(code)))", cause: .network, path: path)
        case nil:
            return OfflineAgentError(phase, "request to \(endpoint) failed: \(describe(error))", cause: .network, path: path)
        }
    }

    /// `NIOConnectionError` says "DNS error: …" when the name did not resolve.
    private static func isDNSFailure(_ error: any Error) -> Bool {
        String(describing: type(of: error)) == "NIOConnectionError" && String(describing: error).hasPrefix("DNS error")
    }
}
