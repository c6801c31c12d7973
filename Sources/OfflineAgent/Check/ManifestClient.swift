import AsyncHTTPClient
import Crypto
import FoundationEssentials
import NIOCore

/// Fetches a manifest per `docs/PROTOCOL.md`: query parameters, ETag, body cap, signature.
struct ManifestClient: Sendable {
    /// Bodies above this size are refused.
    static let maxBodyBytes = 1 << 20
    /// Retry-After is honoured at most this far ahead.
    static let maxRetryAfter: TimeInterval = 86_400

    let fetcher: HTTPFetcher
    /// Trusted keys; when any is set, the manifest must verify with one of them.
    let publicKeys: [Curve25519.Signing.PublicKey]

    /// The manifest URL with `app` and `current` appended after any query it already
    /// has, or (`appendQuery` false, for a CDN whose cache the parameters would split)
    /// the URL exactly as configured.
    ///
    /// The URL's own query is kept byte for byte, once: decoding and re-encoding its
    /// items could change what a signed or cache-keyed URL says.
    static func requestURL(_ base: URL, app: String, current: Version?, appendQuery: Bool = true) throws -> URL {
        guard var components = URLComponents(url: base, resolvingAgainstBaseURL: true) else {
            throw OfflineAgentError(.usage, "invalid manifest URL", path: base.absoluteString)
        }
        guard appendQuery else { return base.absoluteURL }
        var ours = URLComponents()
        ours.queryItems = [URLQueryItem(name: "app", value: app), URLQueryItem(name: "current", value: current?.description ?? "")]
        let added = ours.percentEncodedQuery ?? ""
        if let existing = components.percentEncodedQuery, !existing.isEmpty {
            components.percentEncodedQuery = existing + (existing.hasSuffix("&") ? "" : "&") + added
        } else {
            components.percentEncodedQuery = added
        }
        guard let url = components.url else {
            throw OfflineAgentError(.usage, "invalid manifest URL", path: base.absoluteString)
        }
        return url
    }

    /// The whole exchange, `.sig` included, ends within `settings.manifestTimeout` (`.timeout`).
    func fetch(
        base: URL, app: String, current: Version?, etag: String?, now: Date = Date(), appendQuery: Bool = true
    ) async throws -> ManifestResponse {
        let url = try Self.requestURL(base, app: app, current: current, appendQuery: appendQuery)
        let limit = fetcher.settings.manifestTimeout
        return try await Deadline.run(within: limit, expired: {
            OfflineAgentError(.manifest, "manifest exchange did not finish within \(Deadline.describe(limit))", cause: .timeout, path: url.absoluteString)
        }) {
            try await exchange(url: url, app: app, etag: etag, now: now)
        }
    }

    private func exchange(url: URL, app: String, etag: String?, now: Date) async throws -> ManifestResponse {
        var headers = [("Accept", "application/json")]
        if let etag { headers.append(("If-None-Match", etag)) }
        let (response, finalURL) = try await fetcher.get(url, headers: headers, phase: .manifest, timeout: fetcher.settings.manifestTimeout)
        switch response.status.code {
        case 200:
            break
        case 304:
            // Only an answer to our If-None-Match may mean "unchanged"; otherwise we would
            // call a version current that was never compared with anything.
            guard etag != nil else {
                throw OfflineAgentError(.manifest, "server answered 304 to a request without If-None-Match", cause: .protocolViolation, path: url.absoluteString)
            }
            return .notModified
        case 429, 503:
            guard let until = response.headers.retryAfter(now: now) else {
                throw OfflineAgentError(.manifest, "server answered \(response.status.code) without a usable Retry-After", cause: .manifestUnavailable, path: url.absoluteString)
            }
            return .retryAfter(min(until, now.addingTimeInterval(Self.maxRetryAfter)))
        default:
            throw OfflineAgentError(.manifest, "server answered \(response.status.code)", cause: .manifestUnavailable, path: url.absoluteString)
        }
        let body = try await Self.collect(response, limit: Self.maxBodyBytes, url: url)
        // A manifest in an envelope is verified with the signature inside it only: a
        // header or `.sig` file could belong to another manifest (a CDN mid-purge).
        var signed = body
        if let envelope = try ManifestEnvelope.open(body) {
            if !publicKeys.isEmpty {
                guard let signature = envelope.signature else {
                    throw OfflineAgentError(.manifest, "manifest envelope carries no signature", cause: .signatureMissing, path: url.absoluteString)
                }
                try Self.verify(signature, of: envelope.manifest, with: publicKeys)
            }
            signed = envelope.manifest
        } else if !publicKeys.isEmpty {
            let signature: String
            if let header = response.headers.first(name: ManifestSignature.header) {
                signature = header
            } else {
                signature = try await fetchDetachedSignature(for: finalURL)
            }
            try Self.verify(signature, of: body, with: publicKeys)
        }
        let manifest = try Manifest.decode(signed)
        try manifest.validate(forApp: app, installed: nil, now: now)
        return .manifest(manifest, etag: response.headers.first(name: "ETag"))
    }

    /// Verifies with each key in turn (rotation: old and new keys are trusted together).
    static func verify(_ signature: String, of body: Data, with keys: [Curve25519.Signing.PublicKey]) throws {
        var failure: (any Error)?
        for key in keys {
            do {
                try ManifestSignature.verify(signature, of: body, with: key)
                return
            } catch {
                failure = error
            }
        }
        if let failure = failure as? OfflineAgentError {
            // Name the keys tried: the usual cause is a device configured with another
            // key than the one the publisher signs with (`offline-publish keygen` prints
            // the fingerprint of the key it makes).
            let trusted = keys.map { "SHA256:" + SHA256.hash(data: $0.rawRepresentation).prefix(8).hex }.joined(separator: ", ")
            let reason = "\(failure.reason) with any trusted key (trusted: \(trusted)); check that the device trusts the publisher's public key"
            throw OfflineAgentError(failure.code, reason, cause: .signatureInvalid, path: failure.path, underlying: failure.underlying)
        }
        if let failure { throw failure }
    }

    /// A static host publishes the signature at the manifest's path + `.sig`, same query.
    private func fetchDetachedSignature(for manifestURL: URL) async throws -> String {
        guard var components = URLComponents(url: manifestURL, resolvingAgainstBaseURL: true) else {
            throw OfflineAgentError(.manifest, "manifest signature missing", path: manifestURL.absoluteString)
        }
        components.path += ".sig"
        guard let url = components.url else {
            throw OfflineAgentError(.manifest, "manifest signature missing", path: manifestURL.absoluteString)
        }
        let (response, _) = try await fetcher.get(url, headers: [], phase: .manifest, timeout: fetcher.settings.manifestTimeout)
        guard response.status.code == 200 else {
            throw OfflineAgentError(.manifest, "manifest signature missing (no header, .sig answered \(response.status.code))", cause: .signatureMissing, path: url.absoluteString)
        }
        let body = try await Self.collect(response, limit: 4096, url: url)
        return String(decoding: body, as: UTF8.self)
    }

    private static func collect(_ response: HTTPClientResponse, limit: Int, url: URL) async throws -> Data {
        if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > limit {
            throw OfflineAgentError(.manifest, "manifest body of \(length) bytes exceeds \(limit)", cause: .tooLarge, path: url.absoluteString)
        }
        var data = Data()
        do {
            for try await chunk in response.body {
                guard data.count + chunk.readableBytes <= limit else {
                    throw OfflineAgentError(.manifest, "manifest body exceeds \(limit) bytes", cause: .tooLarge, path: url.absoluteString)
                }
                data.append(contentsOf: chunk.readableBytesView)
            }
        } catch let error as OfflineAgentError {
            throw error
        } catch {
            let failure = HTTPFetcher.failure(error, phase: .manifest, url: url)
            throw OfflineAgentError(.manifest, "reading manifest failed: \(failure.reason)", cause: failure.cause, path: url.absoluteString)
        }
        return data
    }
}
