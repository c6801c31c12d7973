import FoundationEssentials
import OfflineAgent
import OfflineHTTP
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The origins `serve` mirrors (`docs/PROTOCOL.md`, "Mirrored origins"): every origin
/// an active version's whitelist names, with the whitelist prefixes that select an app.
///
/// Recomputed only when the store changes, like `LocalVersions`: each request compares
/// the apps directory's identity and, per app, the `current` link's target and the
/// record's identity with the ones the kept snapshot was made from (a `stat` and a
/// `readlink` per app), so an install, swap or rollback is seen by the very next request.
final class LocalMirrors: Sendable {
    /// One whitelist prefix of an active version.
    struct Prefix: Sendable {
        var app: String
        var url: ParsedURL
    }

    /// The mirrored origins the store names at one moment.
    struct Snapshot: Sendable {
        /// Every origin an active whitelist names (and that `MirrorOrigin` can mirror).
        var origins: Set<MirrorOrigin> = []
        /// The whitelist prefixes on each origin.
        var prefixes: [MirrorOrigin: [Prefix]] = [:]
        /// Each origin by its mirror host (`MirrorOrigin.mirrorHost`), the name a request's `Host` carries.
        var byMirrorHost: [String: MirrorOrigin] = [:]

        /// The app whose whitelist selects `path` (percent-encoded) on `origin`: the
        /// longest matching prefix wins, as in `Resolver.resolve`.
        func app(origin: MirrorOrigin, path: String) -> String? {
            let target = ParsedURL(origin: origin, path: path)
            var best: (app: String, length: Int)?
            for prefix in prefixes[origin] ?? [] where target.rest(after: prefix.url) != nil {
                if best == nil || prefix.url.path.count > best!.length { best = (prefix.app, prefix.url.path.count) }
            }
            return best?.app
        }
    }

    private struct AppKey: Equatable {
        var app: String
        var target: String?
        var record: FileFingerprint?
    }

    private struct Key: Equatable {
        var apps: FileFingerprint?
        var entries: [AppKey]
    }

    private let store: Store
    private let appsDirectory: String
    /// How many times the apps directory was listed (tests: a stable store is listed once).
    package let listings = Atomic<Int>(0)
    /// The apps list and its directory's identity, and the key and snapshot made from them.
    private let state = Mutex<(names: (FileFingerprint?, [String])?, key: Key?, snapshot: Snapshot)>((nil, nil, Snapshot()))

    init(store: Store) {
        self.store = store
        appsDirectory = "\(store.root)/apps"
    }

    /// The mirrored origins of the store as it is now: the kept snapshot while its key
    /// (`currentKey`) is unchanged.
    func snapshot() -> Snapshot {
        let key = currentKey()
        if let kept = state.withLock({ $0.key == key ? $0.snapshot : nil }) { return kept }
        var snapshot = Snapshot()
        for entry in key.entries {
            guard let installed = store.active(entry.app) else { continue }
            for prefix in installed.whitelist {
                guard let url = ParsedURL(string: prefix), let origin = MirrorOrigin(scheme: url.scheme, host: url.host, port: url.port)
                else { continue }
                snapshot.origins.insert(origin)
                snapshot.byMirrorHost[origin.mirrorHost] = origin
                snapshot.prefixes[origin, default: []].append(Prefix(app: entry.app, url: url))
            }
        }
        // An origin belongs to one app: one that two active whitelists name (a root from
        // before the rule) is forwarded to the network, never served from either package.
        for (origin, prefixes) in snapshot.prefixes where Set(prefixes.map(\.app)).count > 1 {
            snapshot.prefixes[origin] = []
        }
        state.withLock {
            $0.key = key
            $0.snapshot = snapshot
        }
        return snapshot
    }

    /// What the snapshot depends on, read now (the apps list only when its directory changed).
    private func currentKey() -> Key {
        let apps = FileFingerprint(directory: appsDirectory)
        let names: [String]
        // The directory's time has whole seconds: a listing made in the second it changed may miss an app.
        if let kept = state.withLock({ $0.names }), let apps, kept.0 == apps, apps.modifiedSeconds < Int(time(nil)) - 1 {
            names = kept.1
        } else {
            names = store.apps()
            listings.add(1, ordering: .relaxed)
            state.withLock { $0.names = (apps, names) }
        }
        let entries = names.map { app -> AppKey in
            let target = LocalVersions.readLink("\(appsDirectory)/\(app)/current")
            let record = target.flatMap { FileFingerprint(path: "\(appsDirectory)/\(app)/\($0).json") }
            return AppKey(app: app, target: target, record: record)
        }
        return Key(apps: apps, entries: entries)
    }
}
