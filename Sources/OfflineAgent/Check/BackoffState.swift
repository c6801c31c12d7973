import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An app's consecutive failed checks and the earliest next check they allow
/// (`<root>/apps/<app>/backoff.json`, absent after a success).
struct BackoffState: Sendable, Equatable, Codable {
    var failures: Int
    var nextCheck: Date

    static func path(_ store: Store, _ app: String) -> String { "\(store.appDirectory(app))/backoff.json" }

    /// The recorded state; nil when there is none or it cannot be read (a lost backoff costs one early check).
    static func load(_ store: Store, app: String) -> BackoffState? {
        guard let data = FileManager.default.contents(atPath: path(store, app)) else { return nil }
        return try? Store.decoder.decode(BackoffState.self, from: data)
    }

    func save(_ store: Store, app: String) throws {
        let path = Self.path(store, app)
        do {
            try FileSystem.writeAtomically(try Store.encoder.encode(self), to: path)
        } catch let failure as POSIXFailure {
            throw OfflineAgentError(.install, "cannot write backoff state", cause: failure.errno == ENOSPC ? .diskFull : .io, path: path, underlying: failure)
        }
    }

    static func clear(_ store: Store, app: String) {
        FileSystem.remove(path(store, app))
    }
}
