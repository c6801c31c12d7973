import FoundationEssentials

/// Packages of one app refused for their *content* (a hostile or corrupt archive, a
/// patched result and a full package that both fail their hash), remembered by their
/// SHA-256 in `apps/<app>/refused.json` so the same bytes are not downloaded again on
/// every run. Bounded (the newest `limit` entries) and replaced atomically; a file that
/// cannot be read is treated as empty. Transport failures are never recorded here.
struct RefusedPackages: Codable, Equatable {
    /// One refusal: the manifest's `packageSha256`, the full file's hash when the
    /// refusal was of the file the server sent, and the original error.
    struct Entry: Codable, Equatable {
        var packageSha256: String
        /// Set for hash refusals: the refusal holds only while the manifest names this file hash too.
        var fileSha256: String?
        var version: String
        var phase: OfflineAgentError.Code
        var cause: OfflineAgentError.Cause
        var reason: String
        var refusedAt: Date
    }

    static let limit = 16
    var entries: [Entry] = []

    static func path(_ store: Store, app: String) -> String { "\(store.appDirectory(app))/refused.json" }

    static func load(_ store: Store, app: String) -> RefusedPackages {
        guard let data = FileManager.default.contents(atPath: path(store, app: app)) else { return RefusedPackages() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? decoder.decode(RefusedPackages.self, from: data)) ?? RefusedPackages()
    }

    /// The entry refusing what `manifest` offers, if any.
    func match(_ manifest: Manifest) -> Entry? {
        let fileHash = Self.fullFileHash(manifest)
        return entries.last { $0.packageSha256 == manifest.packageSha256 && ($0.fileSha256 == nil || $0.fileSha256 == fileHash) }
    }

    /// Records `error` as the refusal of `manifest`'s package (best effort: a failed
    /// write only costs a download next time).
    static func remember(_ store: Store, app: String, manifest: Manifest, error: OfflineAgentError, fileHashBound: Bool) {
        var record = load(store, app: app)
        let entry = Entry(
            packageSha256: manifest.packageSha256, fileSha256: fileHashBound ? fullFileHash(manifest) : nil,
            version: manifest.version.description, phase: error.code, cause: error.cause, reason: error.reason, refusedAt: Date())
        record.entries.removeAll { $0.packageSha256 == entry.packageSha256 && $0.fileSha256 == entry.fileSha256 }
        record.entries.append(entry)
        record.entries = Array(record.entries.suffix(limit))
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        if let data = try? encoder.encode(record) { try? FileSystem.writeAtomically(data, to: path(store, app: app)) }
    }

    /// The hash of the file a full install downloads (its own hash, or the package's when it is the package).
    static func fullFileHash(_ manifest: Manifest) -> String? {
        manifest.isPatch ? manifest.fullSha256 ?? manifest.packageSha256 : manifest.sha256
    }
}
