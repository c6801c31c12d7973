import Hummingbird
import NIOCore

/// A request's context in `serve`: Hummingbird's, and the event loop of the page's
/// connection, where a forward's origin connection is made and kept (each loop has its
/// own `OriginConnectionPool`), so a page's forwards reuse the same few connections.
struct LocalRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let eventLoop: any EventLoop

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        eventLoop = source.channel.eventLoop
    }
}
