import Crypto
import Foundation
import OfflineAgent

/// Turns a publish state into the manifests clients receive; shared by the static
/// `manifest.json` that `publish` writes and by the reference server, so both
/// describe the same files the same way.
public enum PublishManifest {
    /// The manifest for a client that has `current` installed (nil: nothing).
    ///
    /// - Parameters:
    ///   - fileURLPrefix: put before every file name of the app directory to make the
    ///     `url`/`fullUrl` fields, e.g. `""` beside `manifest.json`, `"mall/"` for
    ///     `/manifest?app=mall`, or an absolute `https://cdn.example.com/mall/`.
    ///   - fullCompression: `.gzip` describes full packages by their `.zip.gz`
    ///     (`compression: gzip`), `.none` by the plain `.zip`.
    ///   - offerPatch: false always describes the full package (the static form).
    ///
    /// Either way the manifest lists every patch to `latest` in `patches`, so a device
    /// that was not asked about (a static manifest, a CDN-cached one) still finds its own.
    /// - Returns: nil when the state has no release for `latest` (never for a checked state).
    public static func manifest(
        from state: PublishState, current: Version?, fileURLPrefix: String,
        fullCompression: Manifest.Compression, offerPatch: Bool = true
    ) -> Manifest? {
        guard let release = state.latestRelease else { return nil }
        let full: (url: String, size: Int64, sha256: String) = switch fullCompression {
        case .gzip: (fileURLPrefix + release.gzipFile, release.gzipSize, release.gzipSha256)
        case .none: (fileURLPrefix + release.packageFile, release.size, release.sha256)
        }
        var manifest = Manifest(
            app: state.app, version: state.latest, miniVersion: state.miniVersion, isPatch: false,
            url: full.url, size: full.size, sha256: full.sha256, packageSha256: release.sha256,
            whitelist: state.whitelist, networkType: state.networkType, rollout: state.rollout,
            expires: state.expires.flatMap(RFC3339.date(from:)), compression: fullCompression,
            patches: state.patches.filter { $0.to == state.latest }.map {
                ManifestPatch(baseVersion: $0.from, url: fileURLPrefix + $0.file, size: $0.size, sha256: $0.sha256)
            },
            fallback: state.fallback)
        manifest.trialLaunches = release.trialLaunches
        manifest.epoch = release.epochValue
        manifest.format = Manifest.formatVersion
        manifest.publishedAt = state.publishedAt.flatMap(RFC3339.date(from:))
        if let schedule = state.stageSchedule, !schedule.isEmpty {
            manifest.stageSchedule = schedule
        } else {
            manifest.stage = state.stage
        }
        if offerPatch, let current, let patch = state.patches.first(where: { $0.from == current && $0.to == state.latest }) {
            manifest.isPatch = true
            manifest.baseVersion = patch.from
            manifest.url = fileURLPrefix + patch.file
            manifest.size = patch.size
            manifest.sha256 = patch.sha256
            manifest.fullUrl = full.url
            manifest.fullSize = full.size
            manifest.fullSha256 = full.sha256
        }
        return manifest
    }

    /// The body bytes of a manifest: keys sorted so equal manifests give equal bytes
    /// (and equal ETags and signatures).
    public static func encode(_ manifest: Manifest, pretty: Bool = false) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted] : [.sortedKeys, .withoutEscapingSlashes]
        let body = try encoder.encode(manifest)
        return pretty ? body + Data("\n".utf8) : body
    }

    /// The static files for `manifest`: `manifest.json` and, when signed, the detached
    /// `manifest.json.sig`.
    ///
    /// Signed, `manifest.json` is a `ManifestEnvelope`: the manifest's fields for agents
    /// of format 1, and the exact signed body with its signature inside, which agents
    /// of format 2 verify alone. The `.sig` signs the whole file, for format 1 agents.
    public static func staticFiles(_ manifest: Manifest, key: SigningKey?) throws -> (manifest: Data, signature: Data?) {
        let body = try encode(manifest, pretty: true)
        guard let key else { return (body, nil) }
        let file = try ManifestEnvelope(manifest: body, signature: try key.sign(body)).file(describing: manifest)
        return (file, Data((try key.sign(file) + "\n").utf8))
    }

    /// A strong ETag (quoted) for a manifest body: the first 128 bits of its SHA-256,
    /// so any change of the bytes changes it and equal bytes share it.
    public static func etag(of body: Data) -> String {
        "\"" + SHA256.hash(data: body).prefix(16).hex + "\""
    }
}
