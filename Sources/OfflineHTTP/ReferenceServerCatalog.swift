import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// A manifest response ready to send: body, validator and signature.
struct RenderedManifest: Sendable {
    var body: Data
    /// Strong ETag (quoted), derived from the body so equal bodies share it.
    var etag: String
    /// Base64 Ed25519 signature of `body`, when the server has a key.
    var signature: String?
}

/// Where a manifest was asked for, which decides how its URLs are written.
enum ManifestRoute: Hashable, Sendable {
    /// `/manifest?app=NAME`: files are at `NAME/<file>` relative to it.
    case query
    /// `/NAME/manifest`: files are beside it.
    case path
}

/// One app of the publish directory, as of one version of its `state.json`.
struct CatalogEntry: Sendable {
    let state: PublishState
    /// Every manifest the app can answer with, rendered once per state change:
    /// per route, the full-package one (key nil) and one per patch base.
    let manifests: [ManifestRoute: [Version?: RenderedManifest]]
    /// Strong ETags of the files `state.json` describes (by name): their SHA-256.
    let fileTags: [String: String]

    func manifest(route: ManifestRoute, current: Version?) -> RenderedManifest? {
        guard let byBase = manifests[route] else { return nil }
        if let current, let patched = byBase[current] { return patched }
        return byBase[nil]
    }
}

/// Reads the apps of a publish directory on demand and keeps the rendered
/// manifests until `state.json` changes.
///
/// Each lookup costs one `stat` of `state.json`: `publish` replaces it by rename,
/// so a new inode (or size/mtime) means a new state, and a test can publish while
/// the server runs.
final class ReferenceServerCatalog: Sendable {
    let directory: String
    let signingKey: SigningKey?
    let fullCompression: Manifest.Compression
    private let cache = LockedBox<[String: (fingerprint: FileFingerprint, entry: CatalogEntry)]>([:])

    init(directory: String, signingKey: SigningKey?, fullCompression: Manifest.Compression) {
        self.directory = directory
        self.signingKey = signingKey
        self.fullCompression = fullCompression
    }

    /// The app's current entry; nil when it was never published here.
    func entry(app: String) throws -> CatalogEntry? {
        let statePath = "\(directory)/\(app)/\(PublishState.fileName)"
        guard let fingerprint = FileFingerprint(path: statePath) else {
            cache.withLock { $0[app] = nil }
            return nil
        }
        if let cached = cache.withLock({ $0[app] }), cached.fingerprint == fingerprint {
            return cached.entry
        }
        // Render outside the lock: concurrent first requests may both do it, harmlessly.
        guard let state = try PublishState.load(appDirectory: "\(directory)/\(app)") else { return nil }
        guard state.app == app else {
            throw OfflineAgentError(.publish, "state.json names app '\(state.app)'", path: statePath)
        }
        let entry = try render(state)
        cache.withLock { $0[app] = (fingerprint, entry) }
        return entry
    }

    private func render(_ state: PublishState) throws -> CatalogEntry {
        let bases: [Version?] = [nil] + state.patches.map(\.from)
        var manifests: [ManifestRoute: [Version?: RenderedManifest]] = [:]
        for route in [ManifestRoute.query, .path] {
            let prefix = route == .query ? "\(state.app)/" : ""
            var byBase: [Version?: RenderedManifest] = [:]
            for base in bases {
                guard let manifest = PublishManifest.manifest(
                    from: state, current: base, fileURLPrefix: prefix, fullCompression: fullCompression) else { continue }
                let body = try PublishManifest.encode(manifest)
                byBase[base] = RenderedManifest(body: body, etag: PublishManifest.etag(of: body), signature: try signingKey?.sign(body))
            }
            manifests[route] = byBase
        }
        var fileTags: [String: String] = [:]
        for release in state.versions {
            fileTags[release.packageFile] = "\"\(release.sha256)\""
            fileTags[release.gzipFile] = "\"\(release.gzipSha256)\""
        }
        for patch in state.patches { fileTags[patch.file] = "\"\(patch.sha256)\"" }
        return CatalogEntry(state: state, manifests: manifests, fileTags: fileTags)
    }
}

/// A value behind a lock, for state shared by concurrent request handlers.
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
