import NIOCore

/// The errno behind a failed request, for both HTTP clients (the agent's fetcher and
/// `serve`'s origin proxy), so both name a refused or reset connection the same way.
package enum SocketErrno {
    /// The errno of a socket error, wherever NIO nested it (`IOError` inside
    /// `NIOConnectionError`, which is not visible from this module's dependencies).
    package static func code(in error: any Error, depth: Int = 0) -> Int32? {
        if let error = error as? IOError { return error.errnoCode }
        guard depth < 4 else { return nil }
        for child in Mirror(reflecting: error).children {
            if let nested = child.value as? any Error, let found = code(in: nested, depth: depth + 1) { return found }
            if let list = child.value as? [Any] {
                for element in list {
                    if let nested = element as? any Error, let found = code(in: nested, depth: depth + 1) { return found }
                    for grandchild in Mirror(reflecting: element).children {
                        if let nested = grandchild.value as? any Error, let found = code(in: nested, depth: depth + 1) { return found }
                    }
                }
            }
        }
        return nil
    }
}
