import Crypto
import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// The collector's secret: a device's credential is HMAC-SHA256(secret, device id), so
/// the collector keeps no list of devices, every instance holding the secret checks any
/// device's credential, and no device's credential speaks for another id.
///
/// Kept as 64 hex digits in a file of mode 0600 (`--collector-secret`, by default beside
/// the SQLite database), created on first start; a new secret voids every credential
/// (devices then enrol again).
public struct CollectorSecret: Sendable {
    private let key: SymmetricKey

    /// A secret of 32 random bytes, kept nowhere (an in-process server's, for tests).
    public static func random() -> CollectorSecret { CollectorSecret(key: SymmetricKey(size: .bits256)) }

    private init(key: SymmetricKey) { self.key = key }

    /// The secret in `path`, created (0600, fsync'd, never replacing one another start
    /// wrote first) when missing. Refuses a file other users may read or write, and one
    /// that does not hold 64 hex digits.
    public static func load(path: String) throws -> CollectorSecret {
        if !FileSystem.exists(path) { try create(path: path) }
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw ServerError(.reports, "cannot read the collector secret", cause: .io, path: path)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw ServerError(.reports, "the collector secret is not a regular file", cause: .io, path: path)
        }
        guard info.st_mode & 0o077 == 0 else {
            throw ServerError(.reports, "the collector secret may be read by other users: chmod 600 \(path)", cause: .io, path: path)
        }
        guard let data = FileManager.default.contents(atPath: path),
              let bytes = Self.bytes(hex: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
              bytes.count == 32 else {
            throw ServerError(.reports, "the collector secret must hold 64 hex digits", cause: .io, path: path)
        }
        return CollectorSecret(key: SymmetricKey(data: bytes))
    }

    private static func create(path: String) throws {
        let bytes = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
        let text = Data((bytes.hex + "\n").utf8)
        do {
            try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path), withIntermediateDirectories: true)
            let (fd, temp) = try FileSystem.makeTemporaryFile(in: FileSystem.parent(of: path), prefix: ".collector-secret.")
            defer { unlink(temp) }
            do {
                defer { close(fd) }
                guard fchmod(fd, 0o600) == 0 else { throw POSIXFailure("chmod \(temp)") }
                try FileDescriptor.writeAll(fd, text)
                guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(temp)") }
            }
            // link() never replaces: two first starts agree on whichever secret won.
            _ = link(temp, path)
        } catch {
            throw ServerError(.reports, "cannot create the collector secret: \(error)", cause: .io, path: path)
        }
    }

    /// The credential of `device`: 64 lowercase hex digits.
    public func credential(device: String) -> String {
        Array(HMAC<SHA256>.authenticationCode(for: Data(Self.label(device)), using: key)).hex
    }

    /// Names the secret without giving it away (HMAC of a fixed label): kept beside each
    /// enrolled id, so a new secret, which voids every credential, lets every id enrol again.
    var fingerprint: String {
        Array(HMAC<SHA256>.authenticationCode(for: Data("offline-server collector secret fingerprint v1".utf8), using: key)).hex
    }

    /// Whether `credential` is `device`'s, compared in constant time.
    func verifies(_ credential: ReportCredential) -> Bool {
        guard let code = Self.bytes(hex: credential.credential) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(code, authenticating: Data(Self.label(credential.device)), using: key)
    }

    /// What is signed: the id under a label, so a credential is good for nothing else.
    private static func label(_ device: String) -> [UInt8] { Array("offline-server device credential v1\n\(device)".utf8) }

    private static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = String.hexValue(digits[index]), let low = String.hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}
