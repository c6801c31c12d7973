import FoundationEssentials

extension Store {
    /// The miniVersion in force for `app`: the higher of the active record's and the last manifest's.
    public func effectiveMiniVersion(_ app: String, record: InstalledVersion) -> Version {
        max(record.miniVersion, checkState(app).knownMiniVersion ?? record.miniVersion)
    }
}
