import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// The active version of an app, held for one response: the same shared `flock` on
/// the version's record that `Store.pin` takes (`ReaderLock`), so garbage collection
/// leaves the directory alone until the last reference goes.
final class LocalPin: Sendable {
    let app: String
    let version: Version
    /// `<root>/apps/<app>/versions/<version>`: files read from it belong to `version` only.
    let directory: String
    /// Modification time of the version's record (rewritten on install and rollback).
    let recordModified: Int
    private let lock: ReaderLock

    init(app: String, version: Version, directory: String, recordModified: Int, lock: ReaderLock) {
        self.app = app
        self.version = version
        self.directory = directory
        self.recordModified = recordModified
        self.lock = lock
    }
}

/// Pins active versions per request like `Store.pin`, without decoding the version
/// record each time: `Store.active` validates a (link target, record file identity)
/// pair once, and later requests reuse that answer while both stay the same.
///
/// Per request this costs a `readlink` of `current`, the lock (`open` + `flock`) and
/// two `stat`s, so a swap (a new link) or a rewritten record is seen by the next request.
final class LocalVersions: @unchecked Sendable {
    private struct Validated: Equatable {
        var target: String
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: timespec

        static func == (a: Validated, b: Validated) -> Bool {
            a.target == b.target && a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
        }
    }

    let store: Store
    private let appsDirectory: String
    private let lock = NSLock()
    private var validated: [String: Validated] = [:]

    init(store: Store) {
        self.store = store
        appsDirectory = "\(store.root)/apps"
    }

    /// Pins the active version of `app`, or nil when none is usable (as `Store.pin`).
    func pin(_ app: String) -> LocalPin? {
        guard AppName.isValid(app) else { return nil }
        let appDirectory = "\(appsDirectory)/\(app)"
        // Two tries: a swap plus collection may land between reading the link and locking.
        for _ in 0..<2 {
            guard let target = Self.readLink("\(appDirectory)/current"), target.hasPrefix("versions/"),
                  let version = Version(String(target.dropFirst("versions/".count))) else { return nil }
            let directory = "\(appDirectory)/versions/\(version)"
            let record = "\(directory).json"
            guard let lock = ReaderLock.shared(record) else { continue }
            var st = stat()
            guard stat(record, &st) == 0 else { continue }
            let key = Validated(
                target: target, device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size), modified: st.st_mtim)
            let known = self.lock.withLock { validated[app] == key }
            if !known {
                // The store's own check: the record decodes and names the linked version.
                guard let active = store.active(app), active.version.description == version.description else { return nil }
                self.lock.withLock { validated[app] = key }
            }
            var dir = stat()
            guard stat(directory, &dir) == 0, (dir.st_mode & S_IFMT) == S_IFDIR else { continue }
            return LocalPin(app: app, version: version, directory: directory, recordModified: st.st_mtim.tv_sec, lock: lock)
        }
        return nil
    }

    /// The target of a symbolic link, nil when `path` is not one.
    static func readLink(_ path: String) -> String? {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 4096) { buffer -> String? in
            let n = readlink(path, buffer.baseAddress!, buffer.count)
            guard n > 0, n < buffer.count else { return nil }
            return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: n), as: UTF8.self)
        }
    }
}
