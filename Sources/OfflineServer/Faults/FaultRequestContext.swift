import Hummingbird
import NIOCore

/// The request context of a server with faults: `BasicRequestContext` plus the
/// connection, which `reset-after` resets.
struct FaultRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
    }
}
