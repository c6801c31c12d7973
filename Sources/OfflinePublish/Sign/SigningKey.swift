import Crypto
import Foundation
import OfflineAgent

/// An Ed25519 private key that signs manifests, stored as base64 of its 32 raw bytes
/// (the format `offline-publish keygen` writes and `--key FILE` reads).
///
/// Wrapping the Crypto type keeps modules that only sign (the reference server)
/// independent of swift-crypto.
public struct SigningKey: Sendable {
    let key: Curve25519.Signing.PrivateKey

    /// A fresh random key.
    public static func generate() -> SigningKey { SigningKey(key: Curve25519.Signing.PrivateKey()) }

    init(key: Curve25519.Signing.PrivateKey) { self.key = key }

    /// Parses base64 of 32 raw bytes (surrounding whitespace allowed).
    public init(base64: String) throws {
        key = try ManifestSignature.privateKey(base64: base64)
    }

    /// Reads a key file written by `offline-publish keygen`.
    public init(contentsOfFile path: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw PublishError(.usage, "cannot read key file", path: path)
        }
        do {
            try self.init(base64: text)
        } catch {
            throw PublishError(.usage, "key file does not hold base64 of a 32-byte Ed25519 private key", path: path)
        }
    }

    /// The private key as base64 of its 32 raw bytes.
    public var base64: String { key.rawRepresentation.base64EncodedString() }

    /// The matching public key as base64 of its 32 raw bytes: what agents are configured with.
    public var publicKeyBase64: String { key.publicKey.rawRepresentation.base64EncodedString() }

    /// Signs `body` (the exact manifest bytes), returning the base64 signature.
    public func sign(_ body: Data) throws -> String {
        try ManifestSignature.sign(body, with: key)
    }

    /// Writes the key to `path` (mode 0600) and its public key to `path.pub` (mode 0644),
    /// refusing to replace an existing key unless `overwrite` is set.
    public func write(to path: String, overwrite: Bool = false) throws {
        if !overwrite, FileSystem.exists(path) {
            throw PublishError(.usage, "key file already exists (use --force to replace it)", path: path)
        }
        do {
            try FileSystem.writeAtomically(Data((base64 + "\n").utf8), to: path, mode: 0o600)
            try FileSystem.writeAtomically(Data((publicKeyBase64 + "\n").utf8), to: path + ".pub", mode: 0o644)
        } catch let error as OfflineAgentError {
            throw PublishError(error)
        } catch {
            throw PublishError(.usage, "cannot write key file", path: path, underlying: error)
        }
    }
}
