import FoundationEssentials

/// The trusted metadata a device keeps for one repository (`TUFMetadataStore`), as
/// `offline-agent status` shows it: each role's version and expiry. A role's life is
/// counted from when the device accepted it (the file's modification time), since
/// metadata does not say when it was signed.
package struct TUFTrustStatus: Sendable, Encodable {
    /// The store's directory name: the first 16 bytes of the SHA-256 of the repository URL.
    package var repository: String
    package var roles: [TUFExpiryNotice]

    /// Every repository under `agentRoot/tuf/`, sorted; unreadable files are left out.
    package static func load(agentRoot: String, now: Date) -> [TUFTrustStatus] {
        let base = "\(agentRoot)/tuf"
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        return names.compactMap { name in
            var roles: [TUFExpiryNotice] = []
            for role in ["root", "targets", "snapshot", "timestamp"] {
                let path = "\(base)/\(name)/\(role).json"
                guard let bytes = FileManager.default.contents(atPath: path), let metadata = try? TUFMetadata(bytes, type: role) else { continue }
                let accepted = (try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date) ?? now
                roles.append(TUFExpiryNotice(
                    role: role, version: metadata.version, expires: metadata.expires,
                    lifetime: metadata.expires.timeIntervalSince(min(accepted, now)), now: now))
            }
            return roles.isEmpty ? nil : TUFTrustStatus(repository: name, roles: roles)
        }
    }
}
