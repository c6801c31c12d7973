import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Moves staged files into an app directory one atomic rename at a time and
/// remembers how to undo each step, so a failed publish leaves the directory as
/// it found it.
///
/// A replaced file is first hard-linked into the staging directory: readers never
/// see it missing, and rolling back is one more rename.
struct PublishTransaction {
    let staging: String
    let target: String
    private var undo: [(description: String, action: () throws -> Void)] = []

    init(staging: String, target: String) {
        self.staging = staging
        self.target = target
    }

    /// Renames `staging/name` over `target/name`.
    mutating func install(_ name: String) throws {
        let from = "\(staging)/\(name)", to = "\(target)/\(name)"
        let backup = try backUp(name)
        guard rename(from, to) == 0 else {
            throw OfflineAgentError(.publish, "cannot move file into the publish directory", path: to, underlying: POSIXFailure("rename"))
        }
        undo.append(("restore \(to)", { [backup] in
            if let backup {
                guard rename(backup, to) == 0 else { throw POSIXFailure("rename \(backup) -> \(to)") }
            } else {
                guard unlink(to) == 0 else { throw POSIXFailure("unlink \(to)") }
            }
        }))
    }

    /// Removes `target/name` when it exists (a stale file the new state no longer matches).
    mutating func remove(_ name: String) throws {
        let path = "\(target)/\(name)"
        guard let backup = try backUp(name) else { return }
        guard unlink(path) == 0 else {
            throw OfflineAgentError(.publish, "cannot remove stale file", path: path, underlying: POSIXFailure("unlink"))
        }
        undo.append(("restore \(path)", {
            guard rename(backup, path) == 0 else { throw POSIXFailure("rename \(backup) -> \(path)") }
        }))
    }

    /// fsyncs the target directory so the renames survive a crash.
    func commit() throws {
        do {
            try FileSystem.sync(target)
        } catch {
            throw OfflineAgentError(.publish, "cannot flush the publish directory", path: target, underlying: error)
        }
    }

    /// Undoes the steps so far, newest first; returns what could not be undone.
    func rollBack() -> [String] {
        var failures: [String] = []
        for step in undo.reversed() {
            do { try step.action() } catch { failures.append("\(step.description): \(error)") }
        }
        try? FileSystem.sync(target)
        return failures
    }

    /// Hard-links an existing `target/name` into staging; nil when there is none.
    private func backUp(_ name: String) throws -> String? {
        let path = "\(target)/\(name)"
        guard FileSystem.exists(path) else { return nil }
        let backup = "\(staging)/.previous-\(name)"
        guard link(path, backup) == 0 else {
            throw OfflineAgentError(.publish, "cannot keep a rollback copy of a file", path: path, underlying: POSIXFailure("link"))
        }
        return backup
    }
}
