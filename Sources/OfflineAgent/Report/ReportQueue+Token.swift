import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension ReportQueue {
    /// `<dir>/token`: the bearer token of this queue's collector, recorded by the sync
    /// that was given it, so whoever flushes later (a lifecycle transition's next sync,
    /// `serve`'s usage reporter) sends it without any config. It belongs to this one URL:
    /// the token never goes to another collector.
    private var tokenPath: String { "\(directory)/token" }

    /// The recorded token; nil when there is none or the file holds no valid token.
    package func token() -> String? {
        guard let data = FileManager.default.contents(atPath: tokenPath) else { return nil }
        // A hand-written file may end with a newline.
        let token = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        return ReportToken.isValid(token) ? token : nil
    }

    /// Records `token` for this collector (nil: it wants none, so the recorded one is
    /// removed); mode 0600, replaced atomically, written only on change. A change lifts
    /// the queue's backoff: a collector that refused the old token is asked again now.
    package func remember(token: String?) throws {
        guard let token else {
            if FileSystem.exists(tokenPath) {
                unlink(tokenPath)
                try retryNow()
            }
            return
        }
        guard ReportToken.isValid(token) else { throw OfflineAgentError(.usage, "reportToken must be \(ReportToken.rule)") }
        guard self.token() != token else { return }
        try prepare()
        try FileSystem.writeAtomically(Data(token.utf8), to: tokenPath, mode: 0o600)
        try retryNow()
    }
}
