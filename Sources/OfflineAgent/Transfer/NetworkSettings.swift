import FoundationEssentials
import Logging

/// Timeouts and limits for every request the agent makes.
public struct NetworkSettings: Sendable, Equatable {
    /// Time allowed to establish a connection. A refused connection fails at once, not after this.
    public var connectTimeout: Duration = .seconds(10)
    /// Longest silence allowed between two reads of a response.
    public var readTimeout: Duration = .seconds(30)
    /// A download is aborted when it averages fewer bytes per second than this over `speedWindow`.
    public var minimumBytesPerSecond: Int64 = 1024
    /// The window over which `minimumBytesPerSecond` is measured.
    public var speedWindow: Duration = .seconds(30)
    /// Redirects followed at most per request; https → http is never followed.
    public var maxRedirects = 10
    /// The whole manifest exchange (connect, headers, body, redirects, `.sig`) must
    /// finish within this time, however slowly the server trickles bytes.
    public var manifestTimeout: Duration = .seconds(30)

    /// The defaults described on each property.
    public init() {}
}
