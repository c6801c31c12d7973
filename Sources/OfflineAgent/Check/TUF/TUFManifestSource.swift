import FoundationEssentials

/// The manifest of an app in a TUF repository (`docs/PROTOCOL.md`, "TUF repository"):
/// the manifest URL `<base>/APP/manifest.json` names the repository `<base>/`; the
/// manifest is the target `APP/manifest.json`, and every package and patch it names
/// must be a target too, with the manifest's size and SHA-256. The targets role signs
/// the manifest; it needs no signature of its own.
struct TUFManifestSource: Sendable {
    let fetcher: HTTPFetcher
    let agentRoot: String
    /// The configured trusted root (`--trusted-root`, `trustedRoot`).
    let trustedRoot: [UInt8]

    /// The repository a manifest URL belongs to: the URL without `APP/manifest.json`
    /// (and without a query, which a static repository does not read).
    static func repository(of manifestURL: URL, app: String) throws -> URL {
        let suffix = "/\(app)/manifest.json"
        guard var components = URLComponents(url: manifestURL, resolvingAgainstBaseURL: true), components.path.hasSuffix(suffix) else {
            throw OfflineAgentError(
                .usage, "with a trusted root the manifest URL must be <base>/\(app)/manifest.json (the repository is <base>/)",
                path: manifestURL.absoluteString)
        }
        components.path = String(components.path.dropLast(suffix.count - 1))
        components.query = nil
        components.fragment = nil
        guard let url = components.url else { throw OfflineAgentError(.usage, "invalid manifest URL", path: manifestURL.absoluteString) }
        return url
    }

    /// Refreshes the repository's metadata, then downloads and checks the manifest.
    func fetch(manifestURL: URL, app: String, now: Date) async throws -> ManifestResponse {
        let repository = try Self.repository(of: manifestURL, app: app)
        let limit = fetcher.settings.manifestTimeout
        return try await Deadline.run(within: limit, expired: {
            OfflineAgentError(.manifest, "metadata and manifest exchange did not finish within \(Deadline.describe(limit))", cause: .timeout, path: repository.absoluteString)
        }) {
            let client = TUFClient(
                fetcher: fetcher, repository: repository, store: TUFMetadataStore(agentRoot: agentRoot, repository: repository),
                bootstrap: trustedRoot, now: now)
            var set = try await TUFRefreshGate.shared.refresh(client)
            let bytes = try await client.target("\(app)/manifest.json", in: &set)
            // Which role's metadata lists the manifest, and its version: what a halt names.
            let lister = try await client.findListing("\(app)/manifest.json", in: &set).map { ($0.role, set.targets(of: $0.role)?.metadata.version ?? 0) }
            var body = Data(bytes)
            if let envelope = try ManifestEnvelope.open(body) { body = envelope.manifest }
            var manifest = try Manifest.decode(body)
            try manifest.validate(forApp: app, installed: nil, now: now)
            try await Self.checkFiles(of: manifest, manifestURL: manifestURL, repository: repository, client: client, in: &set)
            // The app's halt role may narrow this manifest's stage, and do nothing else.
            let rolloutPath = "\(app)/\(TUFRollout.fileName)"
            if let info = try await client.find(rolloutPath, in: &set) {
                guard info.length <= TUFRollout.cap else {
                    throw OfflineAgentError(
                        .manifest, "\(rolloutPath) is listed with \(info.length) bytes, above its \(TUFRollout.cap)-byte limit", cause: .lengthExceeded)
                }
                let rollout = try TUFRollout(try await client.target(rolloutPath, in: &set))
                manifest = rollout.narrow(manifest, app: app, manifestBytes: bytes, listedBy: lister, now: now)
            }
            return .manifest(manifest, etag: nil)
        }
    }

    /// Every file the manifest names must be a target listed with its size and SHA-256:
    /// the manifest cannot point a device at bytes the targets role never signed for.
    /// Each is searched as the manifest was (through the delegations: an app's role
    /// vouches for its own files only).
    static func checkFiles(of manifest: Manifest, manifestURL: URL, repository: URL, client: TUFClient, in set: inout TUFTrustedSet) async throws {
        var files = [(manifest.url, manifest.size, manifest.sha256)] + manifest.patches.map { ($0.url, $0.size, $0.sha256) }
        if let url = manifest.fullUrl, let size = manifest.fullSize, let sha256 = manifest.fullSha256 { files.append((url, size, sha256)) }
        let base = repository.absoluteString
        for (url, size, sha256) in files {
            let resolved = URL(string: url, relativeTo: manifestURL)?.absoluteURL.absoluteString ?? url
            let path = resolved.hasPrefix(base) ? String(resolved.dropFirst(base.count)) : nil
            guard let path, let target = try await client.find(path, in: &set) else {
                throw OfflineAgentError(.manifest, "\(url) is not a target of the repository \(base)", cause: .targetUnlisted, path: resolved)
            }
            guard target.length == size, target.sha256 == sha256.lowercased() else {
                throw OfflineAgentError(
                    .manifest, "\(path) is listed in targets with \(target.length) bytes and another SHA-256 than the manifest gives",
                    cause: .targetUnlisted, path: resolved)
            }
        }
    }
}
