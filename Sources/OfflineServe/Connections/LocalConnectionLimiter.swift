import FoundationEssentials
import NIOCore
import Synchronization
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Counts the open connections of one `LocalServer` against its cap, and knows which of
/// them are idle: no request read and not yet answered (`LocalRequestFraming`), a new
/// connection included until its first request.
///
/// At the cap, a new connection takes the slot of the one idle longest, which is closed:
/// a local process holding sockets open without sending a request (or between requests)
/// cannot lock the web view out. Only when every connection is busy is the new one refused.
final class LocalConnectionLimiter: Sendable {
    let limit: Int

    private struct Slot {
        let channel: any Channel
        /// Since when the connection has been idle; nil while a request is in progress.
        var idleSince: NIODeadline?
    }

    private struct State {
        var open = 0
        /// Each open connection not yet chosen to be closed for another.
        var slots: [ObjectIdentifier: Slot] = [:]
    }

    private let state = Mutex(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// What became of a new connection.
    enum Admission {
        case admitted
        /// Admitted in the place of `evicted`, which the caller closes.
        case admittedClosing(evicted: any Channel)
        case refused
    }

    /// Takes a slot for `channel`, idle until its first request.
    func acquire(_ channel: any Channel) -> Admission {
        state.withLock { state in
            var admission = Admission.admitted
            if state.open >= limit {
                guard let (key, slot) = state.slots.filter({ $0.value.idleSince != nil }).min(by: { $0.value.idleSince! < $1.value.idleSince! })
                else { return .refused }
                // Its slot is given back once it has closed (`release`); until then it is no candidate.
                state.slots[key] = nil
                admission = .admittedClosing(evicted: slot.channel)
            }
            state.open += 1
            state.slots[ObjectIdentifier(channel)] = Slot(channel: channel, idleSince: .now())
            return admission
        }
    }

    /// Gives back the slot of a closed connection.
    func release(_ channel: any Channel) {
        state.withLock { state in
            state.open -= 1
            state.slots[ObjectIdentifier(channel)] = nil
        }
    }

    /// `channel` became idle (its requests all answered) or busy (a request began).
    func setIdle(_ channel: any Channel, _ idle: Bool) {
        state.withLock { state in
            state.slots[ObjectIdentifier(channel)]?.idleSince = idle ? .now() : nil
        }
    }

    /// Connections open now.
    var count: Int { state.withLock { $0.open } }

    /// `requested`, lowered so that every connection can also hold a file open for its
    /// response with descriptors to spare: at most (soft `RLIMIT_NOFILE` − 64) / 2.
    static func effectiveLimit(_ requested: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int.max) else {
            return requested
        }
        let available = Int(clamping: limit.rlim_cur)
        return max(1, min(requested, (available - 64) / 2))
    }
}
