/// Targets metadata's `delegations`: the keys of the roles it delegates to, and those
/// roles in the order the search consults them (spec 4.5, 5.6.7).
package struct TUFDelegations: Sendable {
    /// key id → key, Ed25519 keys only (as in root).
    package let keys: [String: TUFKey]
    package let roles: [TUFDelegatedRole]

    package init(keys: [String: TUFKey], roles: [TUFDelegatedRole]) {
        self.keys = keys
        self.roles = roles
    }

    /// Reads `delegations`; role names must not repeat. `succinct_roles` (TAP 15) is not
    /// read: targets delegated only that way are not found (`target-unlisted`).
    package init(_ fields: TUFFields) throws {
        keys = try TUFKey.keys(fields.object("keys"), context: "\(fields.context).keys")
        var roles: [TUFDelegatedRole] = []
        if case .array(let list)? = fields.members["roles"] {
            for value in list {
                let role = try TUFDelegatedRole(TUFFields(value, context: "\(fields.context).roles[]"))
                guard !roles.contains(where: { $0.name == role.name }) else {
                    throw TUFKey.invalid("\(fields.context).roles names '\(StrictJSON.printable(role.name))' twice")
                }
                roles.append(role)
            }
        } else if fields.members["roles"] != nil || fields.members["succinct_roles"] == nil {
            throw TUFKey.invalid("\(fields.context).roles must be an array")
        }
        self.roles = roles
    }

    package var json: StrictJSON {
        .object(["keys": .object(keys.mapValues(\.json)), "roles": .array(roles.map(\.json))])
    }

    /// The roles to consult for `target`, in order, up to and including the first
    /// terminating one that matches (python-tuf's `get_roles_for_target`).
    package func roles(for target: String) -> [TUFDelegatedRole] {
        var matching: [TUFDelegatedRole] = []
        for role in roles where role.matches(target) {
            matching.append(role)
            if role.terminating { break }
        }
        return matching
    }

    /// Checks delegated metadata of role `name` against these keys and its threshold.
    ///
    /// - Throws: `threshold-not-met`; `target-unlisted` when no role is named `name`.
    package func verify(_ metadata: TUFMetadata, as name: String) throws {
        guard let delegated = roles.first(where: { $0.name == name }) else {
            throw OfflineAgentError(.manifest, "no delegation names the role \(StrictJSON.printable(name))", cause: .targetUnlisted)
        }
        try metadata.verify(by: delegated.role, keys: keys, name: name)
    }
}
