import Crypto
import FoundationEssentials

/// Ed25519 signatures over the exact bytes of a manifest body (`docs/PROTOCOL.md`, "Signatures").
public enum ManifestSignature {
    /// The response header carrying the base64 signature.
    public static let header = "X-Offline-Signature"

    /// Parses a base64 Ed25519 public key (32 raw bytes).
    public static func publicKey(base64: String) throws -> Curve25519.Signing.PublicKey {
        guard let raw = Data(base64Encoded: base64.trimmingWhitespace()), raw.count == 32,
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else {
            throw OfflineAgentError(.usage, "public key is not 32 bytes of base64")
        }
        return key
    }

    /// Parses a base64 Ed25519 private key (32 raw bytes, as written by `offline-publish keygen`).
    public static func privateKey(base64: String) throws -> Curve25519.Signing.PrivateKey {
        guard let raw = Data(base64Encoded: base64.trimmingWhitespace()), raw.count == 32,
              let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw) else {
            throw OfflineAgentError(.usage, "private key is not 32 bytes of base64")
        }
        return key
    }

    /// Signs `body`, returning the base64 signature.
    public static func sign(_ body: Data, with key: Curve25519.Signing.PrivateKey) throws -> String {
        try key.signature(for: body).base64EncodedString()
    }

    /// Verifies a base64 signature of `body`; throws `.manifest` when it is malformed or wrong.
    public static func verify(_ signature: String, of body: Data, with key: Curve25519.Signing.PublicKey) throws {
        guard let raw = Data(base64Encoded: signature.trimmingWhitespace()), raw.count == 64 else {
            throw OfflineAgentError(.manifest, "manifest signature is not 64 bytes of base64", cause: .signatureInvalid)
        }
        guard key.isValidSignature(raw, for: body) else {
            throw OfflineAgentError(.manifest, "manifest signature does not verify", cause: .signatureInvalid)
        }
    }
}
