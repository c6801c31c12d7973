import FoundationEssentials

/// An active version held for reading: garbage collection leaves its directory alone
/// until the value is released, so a response started before a swap finishes from
/// the version it started with.
public final class PinnedVersion: Sendable {
    public let app: String
    public let record: InstalledVersion
    /// The version directory; files read from it belong to `record.version` only.
    public let directory: String
    private let lock: ReaderLock

    init(app: String, record: InstalledVersion, directory: String, lock: ReaderLock) {
        self.app = app
        self.record = record
        self.directory = directory
        self.lock = lock
    }
}

extension Store {
    /// Pins the active version of `app`, or nil when none is usable.
    public func pin(_ app: String) -> PinnedVersion? {
        guard AppName.isValid(app) else { return nil }
        // Two tries: a swap plus collection may land between reading the link and locking.
        for _ in 0..<2 {
            guard let record = active(app), let lock = ReaderLock.shared(metadataPath(app, record.version)) else { continue }
            let directory = versionDirectory(app, record.version)
            guard FileSystem.isDirectory(directory) else { continue }
            return PinnedVersion(app: app, record: record, directory: directory, lock: lock)
        }
        return nil
    }

    /// The miniVersion in force for `app`: the higher of the active record's and the last manifest's.
    public func effectiveMiniVersion(_ app: String, record: InstalledVersion) -> Version {
        max(record.miniVersion, checkState(app).knownMiniVersion ?? record.miniVersion)
    }
}
