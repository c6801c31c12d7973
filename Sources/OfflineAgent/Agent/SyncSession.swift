import FoundationEssentials
import Synchronization

/// What the concurrent syncs of one batch (`Agent.sync(_:concurrency:)`) share: the
/// root's lock, taken once by the first app that needs it and released when the batch
/// ends, and one cookie jar per profile, so apps of a profile do not overwrite each
/// other's cookies.
final class SyncSession: Sendable {
    private struct State {
        var lock: RootLock?
        var jars: [String: CookieJar] = [:]
    }

    private let root: String
    private let state = Mutex(State())

    init(root: String) {
        self.root = root
    }

    /// The batch's hold on the root's lock; throws `.busy` (and may be asked again) while
    /// another process holds it.
    func lock() throws -> RootLock {
        try state.withLock { state in
            if let lock = state.lock { return lock }
            let lock = try RootLock(root: root)
            state.lock = lock
            return lock
        }
    }

    /// The profile's jar, opened once per batch; the warning comes with the first opening only.
    func jar(_ profile: CookieProfile, now: Date) -> (jar: CookieJar, warning: String?) {
        state.withLock { state in
            if let jar = state.jars[profile.name] { return (jar, nil) }
            let opened = profile.open(now: now)
            state.jars[profile.name] = opened.jar
            return opened
        }
    }
}
