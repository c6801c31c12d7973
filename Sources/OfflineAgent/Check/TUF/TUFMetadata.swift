import FoundationEssentials

/// One TUF metadata file as python-tuf reads it: `{"signed": {...}, "signatures":
/// [{"keyid", "sig"}]}`, the `signed` object's common fields, and the canonical JSON
/// of that object, which is what the signatures cover (never the file's bytes: a
/// repository may indent its files as it likes).
package struct TUFMetadata: Sendable {
    /// The roles a repository has at the top level.
    package static let topLevelRoles: Set<String> = ["root", "timestamp", "snapshot", "targets"]

    /// `signed._type`: root, timestamp, snapshot or targets.
    package let type: String
    /// The `signed` object's fields, unknown ones included.
    package let signed: TUFFields
    /// key id → hex signature; one per key id.
    package let signatures: [String: String]
    package let version: Int64
    package let specVersion: String
    package let expires: Date
    /// The canonical JSON of `signed`: the signed payload.
    package let payload: [UInt8]

    /// Reads a file of role `type`.
    ///
    /// - Throws: `metadata-invalid` for anything python-tuf would not load: not strict
    ///   JSON, another `_type`, a version below 1, `spec_version` not 1.x, `expires`
    ///   not `YYYY-MM-DDTHH:MM:SSZ`, a float anywhere in `signed`, two signatures by one key id.
    package init(_ bytes: some Collection<UInt8>, type expected: String) throws {
        let root: StrictJSON
        do {
            root = try StrictJSON.parse(bytes)
        } catch {
            throw TUFKey.invalid("\(expected) metadata is not JSON: \(error)")
        }
        let file = try TUFFields(root, context: expected)
        signed = try TUFFields(file.members["signed"], context: "\(expected).signed")
        type = try signed.string("_type")
        guard type == expected else { throw TUFKey.invalid("\(expected) metadata has _type '\(StrictJSON.printable(type))'") }
        version = try signed.integer("version", in: 1...Int64.max)
        specVersion = try signed.string("spec_version")
        let parts = specVersion.split(separator: ".", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { (48...57).contains($0) } }), parts[0] == "1" else {
            throw TUFKey.invalid("\(expected) spec_version '\(StrictJSON.printable(specVersion))' is not 1.x")
        }
        guard let date = TUFMetadata.date(try signed.string("expires")) else {
            throw TUFKey.invalid("\(expected).signed.expires is not YYYY-MM-DDTHH:MM:SSZ")
        }
        expires = date
        guard case .array(let list)? = file.members["signatures"] else { throw TUFKey.invalid("\(expected).signatures must be an array") }
        var signatures: [String: String] = [:]
        for entry in list {
            let fields = try TUFFields(entry, context: "\(expected).signatures[]")
            let keyID = try fields.string("keyid")
            guard signatures.updateValue(try fields.string("sig"), forKey: keyID) == nil else {
                throw TUFKey.invalid("\(expected) has two signatures by key id \(StrictJSON.printable(keyID))")
            }
        }
        self.signatures = signatures
        do {
            payload = try CanonicalJSON.encode(.object(signed.members))
        } catch {
            throw TUFKey.invalid("\(expected).signed has no canonical form: \(error)")
        }
    }

    /// Whether `expires` is at or before `now` (python-tuf: `now >= expires` is expired).
    package func isExpired(at now: Date) -> Bool { now >= expires }

    /// Checks that at least `role.threshold` distinct keys of `role`, found in `keys`,
    /// signed `payload`.
    ///
    /// Keys are counted once however many key ids name them: two ids for one key are
    /// one signer, not two (python-tuf counts ids; a threshold of 2 met by one key
    /// listed twice would be no threshold at all).
    /// - Throws: `threshold-not-met`, naming the role and the count.
    package func verify(by role: TUFRole, keys: [String: TUFKey], name: String) throws {
        var signers: Set<[UInt8]> = []
        for keyID in role.keyIDs {
            guard let key = keys[keyID], let signature = signatures[keyID], key.verifies(signature, of: payload) else { continue }
            signers.insert(Array(key.publicKey.rawRepresentation))
        }
        guard signers.count >= role.threshold else {
            throw OfflineAgentError(
                .manifest, "\(name) v\(version) is signed by \(signers.count) of the \(role.threshold) keys its role needs",
                cause: .thresholdNotMet)
        }
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` exactly, as python-tuf reads and writes `expires`.
    package static func date(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 20, b[4] == 45, b[7] == 45, b[10] == 84, b[13] == 58, b[16] == 58, b[19] == 90 else { return nil }
        return RFC3339.date(from: text)
    }

    /// The form `date` reads, in UTC, whole seconds.
    package static func string(_ date: Date) -> String {
        RFC3339.string(from: date)
    }
}
