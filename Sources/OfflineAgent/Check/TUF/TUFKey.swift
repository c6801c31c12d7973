import Crypto
import FoundationEssentials

/// An Ed25519 key as TUF writes it: `{"keytype": "ed25519", "scheme": "ed25519",
/// "keyval": {"public": HEX}}`. Other key types are refused when read (the agent
/// cannot verify them), so a role naming one can only reach its threshold with the
/// Ed25519 keys it also names.
package struct TUFKey: Sendable, Equatable {
    /// The raw 32-byte public key.
    package let publicKey: Curve25519.Signing.PublicKey
    /// The key's JSON object as read, unknown fields included (what its key id hashes).
    package let json: StrictJSON

    package static func == (a: TUFKey, b: TUFKey) -> Bool { a.publicKey.rawRepresentation == b.publicKey.rawRepresentation }

    /// The key a signing key's public half is, written as python-tuf writes it.
    package init(publicKey: Curve25519.Signing.PublicKey) {
        self.publicKey = publicKey
        json = .object([
            "keytype": .string("ed25519"), "scheme": .string("ed25519"),
            "keyval": .object(["public": .string(publicKey.rawRepresentation.hex)]),
        ])
    }

    /// Reads a key object.
    ///
    /// - Throws: `metadata-invalid` for a key that is not Ed25519 with 64 hex digits.
    package init(json: StrictJSON) throws {
        guard case .object(let fields) = json, case .string("ed25519")? = fields["keytype"], case .string("ed25519")? = fields["scheme"],
              case .object(let keyval)? = fields["keyval"], case .string(let hex)? = keyval["public"],
              let raw = TUFKey.bytes(hex: hex), raw.count == 32,
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
        else {
            throw TUFKey.invalid("key is not {keytype: ed25519, scheme: ed25519, keyval: {public: 64 hex digits}}")
        }
        publicKey = key
        self.json = json
    }

    /// A `keys` object (root's or a `delegations`'): key id → key, for the Ed25519 keys.
    /// python-tuf loads a key of another type and cannot verify with it, so it is left out;
    /// a key that is not even an object is malformed metadata.
    package static func keys(_ object: [String: StrictJSON], context: String) throws -> [String: TUFKey] {
        var keys: [String: TUFKey] = [:]
        for (keyID, value) in object {
            if let key = try? TUFKey(json: value) {
                keys[keyID] = key
            } else {
                _ = try TUFFields(value, context: "\(context).\(StrictJSON.printable(keyID))")
            }
        }
        return keys
    }

    /// The key id python-tuf and securesystemslib give this key: the SHA-256 of the
    /// canonical JSON of its `keytype`, `scheme` and `keyval`. Readers treat ids as
    /// opaque (TAP 12); this is what the repository writes.
    package var keyID: String {
        guard case .object(let fields) = json else { return "" }
        let core = StrictJSON.object(fields.filter { ["keytype", "scheme", "keyval"].contains($0.key) })
        return SHA256.hash(data: (try? CanonicalJSON.encode(core)) ?? []).hex
    }

    /// `SHA256:` and the first 8 bytes of the SHA-256 of the raw key, as
    /// `offline-publish keygen` prints a key: what people compare.
    package var fingerprint: String { "SHA256:" + SHA256.hash(data: publicKey.rawRepresentation).prefix(8).hex }

    /// Whether `signature` (hex) is this key's Ed25519 signature of `payload`.
    package func verifies(_ signature: String, of payload: [UInt8]) -> Bool {
        guard let raw = TUFKey.bytes(hex: signature), raw.count == 64 else { return false }
        return publicKey.isValidSignature(raw, for: payload)
    }

    /// Lower- or upper-case hex digits as bytes; nil for anything else.
    package static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ d: UInt8) -> UInt8? {
            switch d {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    static func invalid(_ reason: String) -> OfflineAgentError {
        OfflineAgentError(.manifest, reason, cause: .metadataInvalid)
    }
}
