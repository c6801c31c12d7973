import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent

/// The one way every verb changes an app directory, with one commit point: the rename
/// of `state.json`.
///
/// Before it, the directory holds the old revision (plus new immutable files no state
/// names, which recovery removes); after it, the new one. Everything else is derived
/// from the committed state and put in place after it: the files in `derived`
/// (`manifest.json`, `manifest.json.sig`, and whatever else a verb adds there), whose
/// SHA-256 the new `state.json` records in `derivedFiles`, so `PublishRecovery` can
/// finish a verb a crash cut short from the copies left in its staging directory.
/// A first publish commits by renaming the whole staged app directory into place.
///
/// Callers hold the app's `PublishLock`, and hand `staging` over: `commit()` removes it,
/// except when the state was committed but a derived file could not be put in place
/// (then it is what recovery finishes the verb from).
package struct PublishCommit {
    /// `<publish dir>/<app>`.
    package let appDirectory: String
    /// The verb's staging directory on the same filesystem, holding `files`.
    package let staging: String
    /// The new state, before its `derivedFiles` are recorded.
    package var state: PublishState
    /// New immutable files in `staging` (a package, its gzip, patches): named by their
    /// versions, never rewritten, linked in before the commit.
    package var files: [String] = []
    /// Files derived from `state`, by name: their new bytes, or nil for a file that must
    /// not exist (an old `.sig` beside an unsigned manifest). Replaced after the commit.
    package var derived: [String: Data?] = [:]

    package init(appDirectory: String, staging: String, state: PublishState) {
        self.appDirectory = appDirectory
        self.staging = staging
        self.state = state
    }

    /// The static manifest files of `written` as derived files.
    package mutating func deriveStaticManifest(_ written: (manifest: Data, signature: Data?)) {
        derived[Publisher.manifestFile] = written.manifest
        derived[Publisher.signatureFile] = .some(written.signature)
    }

    /// Commits the new state and puts the derived files in place; returns the committed state.
    ///
    /// - Throws: before the commit, with the directory as it was (the new files undone);
    ///   after it, an error saying the verb happened and what the next verb or an
    ///   `offline-server` start will finish.
    package func commit() throws -> PublishState {
        var state = self.state
        state.derivedFiles = derived.keys.sorted().map { name in
            PublishState.DerivedFile(name: name, sha256: derived[name]!.map { SHA256.hash(data: $0).hex })
        }
        do {
            try state.check(path: nil)
            for (name, bytes) in derived { if let bytes { try Self.writeNew(bytes, to: "\(staging)/\(name)") } }
            try Self.writeNew(try state.encoded(), to: "\(staging)/\(PublishState.fileName)")
            try FileSystem.sync(staging)
        } catch {
            FileSystem.remove(staging)
            throw Self.failure(error, path: staging)
        }
        PublishStep.afterStaging.reached()
        guard FileSystem.isDirectory(appDirectory) else { return try commitFirst(state) }

        var linked: [String] = []
        do {
            // What the renames below would fail on (a directory in the way) fails here, undone.
            for name in files + derived.keys + [PublishState.fileName] { try checkReplaceable(name) }
            for name in files {
                let target = "\(appDirectory)/\(name)"
                // A file of this name no state names: left by a verb a crash cut short.
                if FileSystem.exists(target) { guard unlink(target) == 0 else { throw POSIXFailure("unlink \(target)") } }
                guard link("\(staging)/\(name)", target) == 0 else { throw POSIXFailure("link \(target)") }
                linked.append(name)
                if linked.count == 1 { PublishStep.afterFileLinked.reached() }
            }
            if !linked.isEmpty { try FileSystem.sync(appDirectory) }
            PublishStep.beforeCommit.reached()
            // The commit point.
            try FileSystem.renameDurably("\(staging)/\(PublishState.fileName)", to: "\(appDirectory)/\(PublishState.fileName)")
        } catch {
            for name in linked { unlink("\(appDirectory)/\(name)") }
            try? FileSystem.sync(appDirectory)
            FileSystem.remove(staging)
            throw Self.failure(error, path: appDirectory)
        }
        PublishStep.afterCommit.reached()

        do {
            try Self.applyDerived(state.derivedFiles ?? [], from: [staging], appDirectory: appDirectory)
        } catch {
            let failure = Self.failure(error, path: appDirectory)
            throw PublishError(
                failure.code,
                "\(PublishState.fileName) was committed, but its derived files are not all in place (\(failure.reason)); the next verb or an offline-server start finishes it",
                path: failure.path, underlying: failure.underlying)
        }
        PublishStep.beforeCleanup.reached()
        FileSystem.remove(staging)
        return state
    }

    /// A first publish: the whole app directory appears in one rename.
    private func commitFirst(_ state: PublishState) throws -> PublishState {
        do {
            guard chmod(staging, 0o755) == 0 else { throw POSIXFailure("chmod \(staging)") }
            PublishStep.beforeCommit.reached()
            try FileSystem.renameDurably(staging, to: appDirectory)
        } catch {
            FileSystem.remove(staging)
            throw Self.failure(error, path: appDirectory)
        }
        PublishStep.afterCommit.reached()
        return state
    }

    /// Puts each derived file in place: the copy with its recorded hash found in one of
    /// `sources` (staging directories), or nothing for a file that must not exist.
    /// Returns the names it changed, and those it found wrong with no copy to restore.
    @discardableResult
    static func applyDerived(
        _ files: [PublishState.DerivedFile], from sources: [String], appDirectory: String
    ) throws -> (changed: [String], missing: [String]) {
        var changed: [String] = [], missing: [String] = []
        for file in files {
            let target = "\(appDirectory)/\(file.name)"
            if let sha256 = file.sha256 {
                if Self.isRegularFile(target), (try? PublishFileWriter.digest(of: target).sha256) == sha256 { continue }
                let copy = sources.map { "\($0)/\(file.name)" }.first {
                    Self.isRegularFile($0) && (try? PublishFileWriter.digest(of: $0).sha256) == sha256
                }
                guard let copy else {
                    missing.append(file.name)
                    continue
                }
                guard rename(copy, target) == 0 else { throw POSIXFailure("rename \(copy) -> \(target)") }
            } else {
                guard FileSystem.exists(target) else { continue }
                guard unlink(target) == 0 else { throw POSIXFailure("unlink \(target)") }
            }
            changed.append(file.name)
            if changed.count == 1 { PublishStep.afterDerivedFile.reached() }
        }
        if !changed.isEmpty { try FileSystem.sync(appDirectory) }
        return (changed, missing)
    }

    private func checkReplaceable(_ name: String) throws {
        let path = "\(appDirectory)/\(name)"
        guard FileSystem.exists(path), !Self.isRegularFile(path) else { return }
        throw PublishError(.publish, "cannot replace: not a regular file", path: path)
    }

    static func isRegularFile(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }

    private static func writeNew(_ data: Data, to path: String) throws {
        let writer = try PublishFileWriter(creating: path)
        try writer.write(data)
        _ = try writer.finish()
    }

    private static func failure(_ error: any Error, path: String) -> PublishError {
        if let error = error as? PublishError { return error }
        if let error = error as? OfflineAgentError { return PublishError(error) }
        return PublishError(.publish, "cannot write to the publish directory", path: path, underlying: error)
    }
}
