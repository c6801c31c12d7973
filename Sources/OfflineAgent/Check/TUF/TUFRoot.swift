/// Root metadata: the keys and thresholds of every top-level role, and whether the
/// repository names files consistently (`N.snapshot.json`, `<sha256>.NAME`).
package struct TUFRoot: Sendable {
    package let metadata: TUFMetadata
    /// key id → key, for the Ed25519 keys; keys of other types are left out (they
    /// cannot sign for this client), which only matters if a threshold needs them.
    package let keys: [String: TUFKey]
    package let roles: [String: TUFRole]
    package let consistentSnapshot: Bool

    package init(_ bytes: some Collection<UInt8>) throws {
        metadata = try TUFMetadata(bytes, type: "root")
        let signed = metadata.signed
        keys = try TUFKey.keys(signed.object("keys"), context: "root.keys")
        var roles: [String: TUFRole] = [:]
        for (name, value) in try signed.object("roles") {
            roles[name] = try TUFRole(TUFFields(value, context: "root.roles.\(StrictJSON.printable(name))"))
        }
        guard Set(roles.keys) == TUFMetadata.topLevelRoles else {
            throw TUFKey.invalid("root.roles must name exactly root, timestamp, snapshot and targets")
        }
        self.roles = roles
        consistentSnapshot = try signed.members["consistent_snapshot"] == nil ? false : signed.bool("consistent_snapshot")
    }

    /// The role `name` (one of the four top-level roles, always present).
    package func role(_ name: String) -> TUFRole { roles[name] ?? TUFRole(keyIDs: [], threshold: Int.max) }

    /// Checks `metadata` against this root's keys and threshold for `name`.
    package func verify(_ metadata: TUFMetadata, as name: String) throws {
        try metadata.verify(by: role(name), keys: keys, name: name)
    }

    /// The set of keys each role trusts, with thresholds: when it changes, the trusted
    /// timestamp and snapshot are discarded (spec 5.3.11, fast-forward recovery).
    package func signers(of name: String) -> (keys: Set<[UInt8]>, threshold: Int) {
        let role = role(name)
        return (Set(role.keyIDs.compactMap { keys[$0].map { Array($0.publicKey.rawRepresentation) } }), role.threshold)
    }
}
