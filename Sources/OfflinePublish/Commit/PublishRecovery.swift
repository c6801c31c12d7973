import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent

/// Finishes or undoes a verb a crash cut short, so an app directory is exactly its
/// committed revision again (`PublishCommit`): run under the app's lock by every verb
/// before it reads the state, and by `offline-server` when it starts.
///
/// - A derived file (`manifest.json`, its `.sig`) that does not match the hash
///   `state.json` records is replaced by the copy the verb left in its staging
///   directory: the verb committed, so it is finished.
/// - New immutable files that no state names and that are the very files (same inode)
///   of a staging directory are removed: the verb never committed, so it is undone.
/// - Staging directories (`<app>/.publish-*`, and a first publish's `<publish dir>/.publish-<app>-*`) are removed.
public enum PublishRecovery {
    /// Repairs every app of `publishDirectory` whose lock is free right now (a held lock
    /// is a verb at work, which repairs before it writes); returns one line per change
    /// or problem, for a log. Never throws: a server start must not depend on it.
    public static func recoverAll(publishDirectory: String) -> [String] {
        let out = FileSystem.absolute(publishDirectory)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []
        var lines: [String] = []
        // Apps with a directory, and apps whose first publish left only its staging directory.
        var apps = Set(names.filter { AppName.isValid($0) && FileSystem.isDirectory("\(out)/\($0)") })
        for name in names where name.hasPrefix(".publish-") && name.count > ".publish-".count + 7 {
            let app = String(name.dropFirst(".publish-".count).dropLast(7))
            if AppName.isValid(app), isFirstPublishStaging(name, app: app) { apps.insert(app) }
        }
        for app in apps.sorted() {
            do {
                guard let lock = try PublishLock.tryTaking(app: app, publishDirectory: out) else {
                    lines.append("\(app): a verb holds the publish lock; it repairs the directory itself")
                    continue
                }
                lines += try withExtendedLifetime(lock) { try recover(app: app, publishDirectory: out) }.map { "\(app): \($0)" }
            } catch {
                lines.append("\(app): cannot repair: \(error)")
            }
        }
        return lines
    }

    /// Repairs one app directory; the caller holds its `PublishLock`. Returns what it did.
    @discardableResult
    static func recover(app: String, publishDirectory: String) throws -> [String] {
        let out = FileSystem.absolute(publishDirectory)
        let appDirectory = "\(out)/\(app)"
        var lines: [String] = []
        // A first publish that never committed: its whole staged app directory.
        for name in entries(of: out) where isFirstPublishStaging(name, app: app) {
            FileSystem.remove("\(out)/\(name)")
            lines.append("removed \(name), the staging directory of a publish that never finished")
        }
        guard FileSystem.isDirectory(appDirectory) else { return lines }
        let stagings = entries(of: appDirectory).filter { $0.hasPrefix(".publish-") }.map { "\(appDirectory)/\($0)" }
            .filter(FileSystem.isDirectory)
        guard let state = try PublishState.load(appDirectory: appDirectory) else { return lines }

        if let derived = state.derivedFiles {
            let applied = try PublishCommit.applyDerived(derived, from: stagings, appDirectory: appDirectory)
            lines += applied.changed.map { "finished the last verb: \($0) now matches state.json" }
            lines += applied.missing.map { "\($0) does not match state.json and no staged copy is left: the next verb rewrites it" }
        }
        var referenced: Set<String> = [PublishState.fileName]
        for release in state.versions { referenced.formUnion([release.packageFile, release.gzipFile]) }
        for patch in state.patches { referenced.insert(patch.file) }
        for staging in stagings {
            for name in entries(of: staging) where !referenced.contains(name) && isSameFile("\(staging)/\(name)", "\(appDirectory)/\(name)") {
                guard unlink("\(appDirectory)/\(name)") == 0 else { throw POSIXFailure("unlink \(appDirectory)/\(name)") }
                lines.append("undid the last verb: removed \(name), which no state names")
            }
            FileSystem.remove(staging)
            lines.append("removed \(FileSystem.name(of: staging)), the staging directory of a verb that never finished")
        }
        if !lines.isEmpty { try FileSystem.sync(appDirectory) }
        return lines
    }

    private static func entries(of directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    /// `.publish-<app>-XXXXXX` (mkdtemp's six characters, never a `-`), so app `a` never
    /// takes app `a-b`'s.
    private static func isFirstPublishStaging(_ name: String, app: String) -> Bool {
        let prefix = ".publish-\(app)-"
        guard name.hasPrefix(prefix) else { return false }
        let suffix = name.dropFirst(prefix.count)
        return suffix.count == 6 && !suffix.contains("-")
    }

    /// Both paths are one regular file (same device and inode): a file a verb linked in.
    private static func isSameFile(_ a: String, _ b: String) -> Bool {
        var sa = stat(), sb = stat()
        guard lstat(a, &sa) == 0, lstat(b, &sb) == 0, (sa.st_mode & S_IFMT) == S_IFREG else { return false }
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }
}
