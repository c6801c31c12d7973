import FoundationEssentials

extension Lifecycle {
    /// Confirms `version` of `app` only when it is the active version, checked under the
    /// app's lifecycle lock so a swap cannot slip in between the check and the mark: a
    /// host still showing the old version never confirms a new one it has not shown.
    ///
    /// - Throws: `.stateInvalid` (nothing changed) when `version` is not the active version
    ///   or is marked bad.
    @discardableResult
    public func markGood(_ app: String, ifActive version: Version) throws -> Version {
        try update(app) { record, active in
            guard let active, active == version else { throw Self.notActive(app, version, active) }
            guard !record.isBad(active) else {
                throw OfflineAgentError(.lifecycle, "\(app) \(active) is marked bad and cannot be confirmed", cause: .stateInvalid)
            }
            record.confirm(active, at: Date())
            return active
        }
    }

    /// Marks `version` of `app` bad and rolls back (`markBad(_:reason:)`) only when it is
    /// the active version, checked under the app's lifecycle lock.
    ///
    /// - Throws: `.stateInvalid` (nothing changed) when `version` is not the active version
    ///   or already is marked bad.
    public func markBad(_ app: String, ifActive version: Version, reason: String) throws -> LifecycleTransition {
        guard let transition = try rollBack(app, reason: reason, event: .markBad, expecting: version) else {
            throw Self.notActive(app, version, store.active(app)?.version)
        }
        return transition
    }

    private static func notActive(_ app: String, _ version: Version, _ active: Version?) -> OfflineAgentError {
        OfflineAgentError(
            .lifecycle,
            "\(app) \(version) is not the active version (active: \(active?.description ?? "none")); nothing changed",
            cause: .stateInvalid)
    }
}
