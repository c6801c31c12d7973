import FoundationEssentials

/// A manifest that carries its own signature (`docs/PROTOCOL.md`, "Signatures"): the
/// file is the manifest's fields, for agents that only know detached signatures, plus
/// an `envelope` object holding the exact signed manifest bytes (base64) and their
/// Ed25519 signature.
///
/// An agent that reads the envelope uses only the bytes inside it, verified with the
/// signature beside them, and never pairs them with a header or `.sig` file: no
/// host, CDN or purge order can put a manifest together with another's signature.
public struct ManifestEnvelope: Sendable, Equatable {
    /// The top-level key of the envelope object.
    public static let key = "envelope"

    /// The exact bytes that were signed: a manifest body of its own.
    public var manifest: Data
    /// The base64 Ed25519 signature of `manifest`; nil in an unsigned envelope.
    public var signature: String?

    /// An envelope around `manifest` bytes.
    public init(manifest: Data, signature: String?) {
        self.manifest = manifest
        self.signature = signature
    }

    /// The envelope a manifest body carries, or nil when it has none (a format 1 body,
    /// signed by a header or a detached `.sig`).
    ///
    /// - Throws: `manifestInvalid` when the body is not strict JSON, or the envelope is
    ///   malformed: not an object, `manifest` missing or not base64, `signature` not a
    ///   string, or the inner bytes holding an envelope of their own.
    public static func open(_ body: Data) throws -> ManifestEnvelope? {
        func invalid(_ reason: String) -> OfflineAgentError { OfflineAgentError(.manifest, reason, cause: .manifestInvalid) }
        let root: StrictJSON
        do {
            root = try StrictJSON.parse(body)
        } catch {
            throw invalid("invalid manifest JSON: \(error)")
        }
        guard case .object(let object) = root, let value = object[key], value != .null else { return nil }
        guard case .object(let fields) = value else { throw invalid("envelope must be an object {manifest, signature}") }
        guard case .string(let text)? = fields["manifest"], let inner = Data(base64Encoded: text) else {
            throw invalid("envelope.manifest must be the signed manifest bytes in base64")
        }
        var signature: String?
        switch fields["signature"] {
        case nil, .null?: signature = nil
        case .string(let text)?: signature = text
        default: throw invalid("envelope.signature must be a base64 string")
        }
        // One level only: a nested envelope would let two readers disagree on which bytes count.
        if case .object(let innerObject)? = try? StrictJSON.parse(inner), innerObject[key] != nil {
            throw invalid("envelope.manifest holds another envelope")
        }
        return ManifestEnvelope(manifest: inner, signature: signature)
    }

    /// The file this envelope makes for `manifest`, the manifest its `manifest` bytes
    /// encode: the manifest's fields at the top level (what agents of format 1 read,
    /// verified by a detached `.sig` or header over the whole file), and `envelope`.
    /// Keys sorted and pretty, newline-terminated.
    public func file(describing manifest: Manifest) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        return try encoder.encode(Outer(manifest: manifest, envelope: self)) + Data("\n".utf8)
    }

    /// The manifest's own keys and `envelope` in one object.
    private struct Outer: Encodable {
        let manifest: Manifest
        let envelope: ManifestEnvelope

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        func encode(to encoder: any Encoder) throws {
            try manifest.encode(to: encoder)
            var c = encoder.container(keyedBy: Key.self)
            var inner = c.nestedContainer(keyedBy: Key.self, forKey: Key(stringValue: ManifestEnvelope.key))
            try inner.encode(envelope.manifest.base64EncodedString(), forKey: Key(stringValue: "manifest"))
            try inner.encodeIfPresent(envelope.signature, forKey: Key(stringValue: "signature"))
        }
    }
}
