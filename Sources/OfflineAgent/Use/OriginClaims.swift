import FoundationEssentials
import Synchronization

/// Which web origins each app of a store may claim (`docs/PROTOCOL.md`, "Who claims an
/// origin"): an app's whitelist may name only origins its device configuration allows,
/// and never an origin another installed app's whitelist names, whatever the paths.
/// A page runs with its origin's cookies, `localStorage` and mirror host, so an origin
/// shared between two publishers would let one act for the other.
///
/// The allowed list defaults to the origins of the app's installed whitelist: a device
/// config that names none keeps its first install's origins, and a later manifest that
/// adds another origin is refused until the operator allows it.
package enum OriginClaims {
    /// Held across a claim's check and the install that makes it, so two syncs of one
    /// batch (one process, one root lock) never claim the same origin at once.
    private static let installing = Mutex<Void>(())

    /// Runs `install` (which makes `whitelist` active for `app`) when the claim is
    /// allowed, with no other claim checked or made meanwhile; throws the refusal otherwise.
    package static func claim<T>(
        app: String, whitelist: [String], allowed: [String]?, store: Store, _ install: () throws -> T
    ) throws -> T {
        try installing.withLock { _ in
            if let refusal = refusal(app: app, whitelist: whitelist, allowed: allowed, store: store) { throw refusal }
            return try install()
        }
    }

    /// `scheme://host:port` (host lowercased, no trailing dot, the effective port): the
    /// one spelling two whitelist entries on the same origin share. Nil for anything that
    /// is not an absolute `http`/`https` URL with a host.
    package static func origin(of entry: String) -> String? {
        guard let url = ParsedURL(string: entry) else { return nil }
        var host = url.host
        while host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty else { return nil }
        return "\(url.scheme)://\(host):\(url.port)"
    }

    /// The origins a whitelist names.
    package static func origins(of whitelist: [String]) -> Set<String> {
        Set(whitelist.compactMap(origin(of:)))
    }

    /// The origins an installed app holds: those of its active version's whitelist and of
    /// the kept version a rollback would return to.
    package static func held(by app: String, in store: Store) -> Set<String> {
        guard let active = store.active(app) else { return [] }
        var held = origins(of: active.whitelist)
        if let previous = active.previousVersion, let kept = store.metadata(app, previous) {
            held.formUnion(origins(of: kept.whitelist))
        }
        return held
    }

    /// Nil when `app` may install a version whose whitelist is `whitelist`; else the
    /// refusal (`origin-not-allowed` or `origin-claimed`).
    ///
    /// - Parameter allowed: the device config's list for `app` (origins or URLs on them);
    ///   nil: the origins of its installed whitelist, or any origin when none is installed.
    package static func refusal(app: String, whitelist: [String], allowed: [String]?, store: Store) -> OfflineAgentError? {
        let claimed = origins(of: whitelist)
        let permitted: Set<String>? = allowed.map { Set($0.compactMap(origin(of:))) }
            ?? store.active(app).map { origins(of: $0.whitelist) }
        if let permitted {
            let extra = claimed.subtracting(permitted).sorted()
            if !extra.isEmpty {
                let how = allowed == nil
                    ? "its installed whitelist names only \(list(permitted)); add the origin to the app's \"allowedOrigins\" in the device config to allow it"
                    : "the device config allows only \(list(permitted)) (\"allowedOrigins\")"
                return OfflineAgentError(
                    .manifest, "whitelist of '\(app)' claims \(list(Set(extra))), which this device does not allow it: \(how)",
                    cause: .originNotAllowed)
            }
        }
        for other in store.apps() where other != app {
            let shared = claimed.intersection(held(by: other, in: store))
            if !shared.isEmpty {
                return OfflineAgentError(
                    .manifest,
                    "whitelist of '\(app)' claims \(list(shared)), which installed app '\(other)' holds: one origin belongs to one app, whatever the paths",
                    cause: .originClaimed)
            }
        }
        return nil
    }

    /// Every allowed-origins entry that is not an `http`/`https` URL with a host, for a config check.
    package static func invalidEntries(_ allowed: [String]) -> [String] {
        allowed.filter { origin(of: $0) == nil }
    }

    private static func list(_ origins: Set<String>) -> String {
        origins.isEmpty ? "no origin" : origins.sorted().joined(separator: ", ")
    }
}
