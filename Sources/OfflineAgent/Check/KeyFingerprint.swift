import Crypto
import FoundationEssentials

/// A short, stable name for a trusted public key, for people comparing configurations:
/// `SHA256:` and the first 16 hex digits of the SHA-256 of the raw 32 key bytes.
public enum KeyFingerprint {
    /// - Throws: `OfflineAgentError(.usage)` when `base64` is not an Ed25519 public key.
    public static func of(base64: String) throws -> String {
        let key = try ManifestSignature.publicKey(base64: base64)
        let digest = SHA256.hash(data: key.rawRepresentation)
        return "SHA256:" + digest.prefix(8).hex
    }
}
