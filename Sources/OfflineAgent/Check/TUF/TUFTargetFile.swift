import Crypto
import FoundationEssentials

/// A target as targets metadata lists it: `{"length": L, "hashes": {"sha256": HEX}}`
/// (unknown fields such as `custom` are kept in the signed bytes, unread).
package struct TUFTargetFile: Sendable, Equatable {
    package let length: Int64
    package let hashes: [String: String]

    package init(length: Int64, sha256: String) {
        self.length = length
        hashes = ["sha256": sha256]
    }

    package init(_ fields: TUFFields) throws {
        length = try fields.integer("length", in: 0...Int64.max)
        hashes = try fields.hashes()
    }

    /// The SHA-256 the target must have; nil when it names only other algorithms.
    package var sha256: String? { hashes["sha256"]?.lowercased() }

    package var json: StrictJSON {
        .object(["length": .number(String(length)), "hashes": .object(hashes.mapValues(StrictJSON.string))])
    }

    /// Checks bytes against the length and every hash listed (python-tuf's
    /// `verify_length_and_hashes`); an algorithm this client cannot compute is a
    /// mismatch, never skipped.
    package static func check(_ data: some DataProtocol, length: Int64?, hashes: [String: String]?, name: String) throws {
        if let length, Int64(data.count) != length {
            throw OfflineAgentError(
                .manifest, "\(name) is \(data.count) bytes, its metadata says \(length)",
                cause: Int64(data.count) > length ? .lengthExceeded : .hashMismatch)
        }
        for (algorithm, expected) in hashes ?? [:] {
            let found: String? = switch algorithm {
            case "sha256": SHA256.hash(data: data).hex
            case "sha512": SHA512.hash(data: data).hex
            default: nil
            }
            guard let found, found == expected.lowercased() else {
                throw OfflineAgentError(.manifest, "\(name) does not match its \(algorithm) in the metadata", cause: .hashMismatch)
            }
        }
    }
}
