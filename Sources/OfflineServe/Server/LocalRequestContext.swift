import Hummingbird
import NIOCore

/// A request's context in `serve`: Hummingbird's, and the page's connection. A forward's
/// origin connection is made and kept on its event loop (each loop has its own
/// `OriginConnectionPool`), so a page's forwards reuse the same few connections, and is
/// let go as soon as the page's connection closes.
struct LocalRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let page: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        page = source.channel
    }
}
