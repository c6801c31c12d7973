import Crypto
import Foundation
import OfflineAgent

/// Signs TUF metadata as python-tuf does: Ed25519 over the canonical JSON of the
/// `signed` object, hex signatures, key ids the SHA-256 of the canonical key.
package enum TUFSigner {
    /// The key a signing key's public half is, as root lists it.
    package static func key(_ key: SigningKey) -> TUFKey { TUFKey(publicKey: key.key.publicKey) }

    /// The metadata file for `signed`, signed by each of `keys`.
    package static func file(_ signed: [String: StrictJSON], keys: [SigningKey]) throws -> Data {
        let payload = try CanonicalJSON.encode(.object(signed))
        var signatures: [StrictJSON] = []
        var seen: Set<String> = []
        for signer in keys {
            let keyID = key(signer).keyID
            guard seen.insert(keyID).inserted else { continue }
            let signature = try signer.key.signature(for: payload)
            signatures.append(.object(["keyid": .string(keyID), "sig": .string(Data(signature).hex)]))
        }
        return StrictJSON.object(["signed": .object(signed), "signatures": .array(signatures)]).written()
    }

    /// The common fields of every `signed` object.
    package static func common(type: String, version: Int64, expires: Date) -> [String: StrictJSON] {
        [
            "_type": .string(type), "spec_version": .string("1.0.31"), "version": .number(String(version)),
            "expires": .string(TUFMetadata.string(expires)),
        ]
    }
}
