/// Targets metadata, top-level or delegated: every target path with its length and
/// hashes, and the roles it delegates to.
package struct TUFTargets: Sendable {
    package let metadata: TUFMetadata
    package let targets: [String: TUFTargetFile]
    package let delegations: TUFDelegations?

    package init(_ bytes: some Collection<UInt8>) throws {
        metadata = try TUFMetadata(bytes, type: "targets")
        var targets: [String: TUFTargetFile] = [:]
        for (path, value) in try metadata.signed.object("targets") {
            targets[path] = try TUFTargetFile(TUFFields(value, context: "targets.\(StrictJSON.printable(path))"))
        }
        self.targets = targets
        let delegations = metadata.signed.members["delegations"]
        self.delegations = delegations == nil ? nil : try TUFDelegations(TUFFields(delegations, context: "targets.delegations"))
    }
}
