import Foundation
import OfflineAgent
import OfflineHTTP
import OfflinePublish
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Reads the apps of a publish directory on demand and keeps the rendered
/// manifests until `state.json` changes.
///
/// Each lookup costs one `stat` of `state.json`: `publish` replaces it by rename,
/// so a new inode (or size/mtime) means a new state, and a test can publish while
/// the server runs.
final class ReferenceServerCatalog: Sendable {
    let directory: String
    let signingKey: SigningKey?
    /// TUF: the key auto-halt halts with instead of `signingKey` (an app's halt role).
    let haltKey: SigningKey?
    let fullCompression: Manifest.Compression
    /// The lifetimes the TUF metadata's expiry warnings count from (`/stats`, the
    /// dashboard): a server keeping the timestamp fresh gives its own.
    let metadataExpiry: TUFExpiry
    private let cache = Mutex<[String: (fingerprint: FileFingerprint, entry: CatalogEntry)]>([:])

    init(
        directory: String, signingKey: SigningKey?, haltKey: SigningKey? = nil, fullCompression: Manifest.Compression,
        metadataExpiry: TUFExpiry = TUFExpiry()
    ) {
        self.directory = directory
        self.metadataExpiry = metadataExpiry
        self.signingKey = signingKey
        self.haltKey = haltKey
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
            throw ServerError(.catalog, "state.json names app '\(state.app)'", path: statePath)
        }
        let entry = try render(state)
        cache.withLock { $0[app] = (fingerprint, entry) }
        return entry
    }

    /// The apps of the publish directory: directories with a valid app name and a
    /// `state.json`, sorted. Bounded by the directory, which the operator writes.
    func apps() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { AppName.isValid($0) && FileFingerprint(path: "\(directory)/\($0)/\(PublishState.fileName)") != nil }.sorted()
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
                // Signed, the body is an envelope around the signed bytes, as `manifest.json`
                // is: a cache can never pair it with another answer's header. The header
                // signs the whole body, for agents of format 1.
                var body = try PublishManifest.encode(manifest)
                if let signingKey {
                    body = try ManifestEnvelope(manifest: body, signature: try signingKey.sign(body)).file(describing: manifest)
                }
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
