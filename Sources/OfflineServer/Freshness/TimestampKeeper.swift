import Foundation
import Logging
import OfflineAgent
import OfflinePublish

/// `offline-server --timestamp-key`: re-signs the publish directory's
/// `metadata/timestamp.json` before it gets within half its lifetime of expiring, so a
/// directory nobody publishes to stays fresh for TUF clients (docs/PUBLISHING.md,
/// "Freshness").
///
/// Each re-signing is `offline-publish timestamp`'s own (`TUFRepository.refreshTimestamp`):
/// version + 1, the same snapshot, under the repository's lock (`.metadata.lock`, which
/// every verb's metadata refresh holds too, so a new snapshot is never undone), written
/// by atomic rename. Under that lock it re-signs only if the timestamp is still due: a
/// verb that re-signed meanwhile is not bumped again.
///
/// The schedule is bounded: it looks again when the timestamp falls due, at the latest
/// after `maximumWait` (a timestamp another process wrote with a shorter expiry is seen
/// in time), never sooner than a second; after a failure (a key the root no longer names,
/// a full disk) it logs one line and tries again after `retryWait`.
struct TimestampKeeper: Sendable {
    let directory: String
    let keeping: TimestampKeeping
    let logger: Logger
    /// The time; injectable for tests.
    let now: @Sendable () -> Date

    /// Refuses (`.usage`) a key that is not the root's timestamp key, or that the root
    /// also names for another role.
    init(directory: String, keeping: TimestampKeeping, logger: Logger, now: @escaping @Sendable () -> Date = { Date() }) throws {
        try TUFRepository.checkTimestampOnlyKey(publishDirectory: directory, key: keeping.key)
        self.directory = directory
        self.keeping = keeping
        self.logger = logger
        self.now = now
    }

    /// Re-signed when less than this is left: half the lifetime.
    var margin: TimeInterval { keeping.lifetime / 2 }
    /// The longest wait between two looks: a quarter of the lifetime, at most an hour.
    var maximumWait: TimeInterval { max(1, min(3_600, keeping.lifetime / 4)) }
    /// The wait after a failed re-signing.
    var retryWait: TimeInterval { max(1, min(60, keeping.lifetime / 8)) }

    /// The warnings' windows for this directory: the timestamp's is counted from the
    /// lifetime this server signs with.
    var expiry: TUFExpiry {
        var expiry = TUFExpiry()
        expiry.timestamp = keeping.lifetime
        return expiry
    }

    /// One look: re-signs the timestamp when it is due (or missing or unreadable, which
    /// `refreshTimestamp` then reports).
    ///
    /// - Returns: the seconds to wait before the next look.
    @discardableResult
    func round() async -> TimeInterval {
        let now = now()
        let current = TUFRepository.expiryNotices(publishDirectory: directory, now: now, expiry: expiry).first { $0.role == "timestamp" }
        if let current, current.expires.timeIntervalSince(now) >= margin {
            return wait(untilDue: current.expires, now: now)
        }
        let expires = now.addingTimeInterval(keeping.lifetime)
        let (directory, key, due) = (directory, keeping.key, now.addingTimeInterval(margin))
        do {
            let version = try await OwnThread.run {
                try TUFRepository.refreshTimestamp(publishDirectory: directory, key: key, expires: expires, unlessValidUntil: due)
            }
            logger.notice("timestamp: metadata/timestamp.json is v\(version), expires \(RFC3339.string(from: expires))")
            return wait(untilDue: expires, now: now)
        } catch {
            logger.error("timestamp: cannot re-sign \(directory)/metadata/timestamp.json (tried again in \(Int(retryWait)) s): \(error)")
            return retryWait
        }
    }

    /// Looks at the timestamp until the task is cancelled.
    func run() async {
        while !Task.isCancelled {
            let wait = await round()
            try? await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
        }
    }

    /// Seconds until metadata expiring at `expires` falls due, within [1 s, `maximumWait`].
    func wait(untilDue expires: Date, now: Date) -> TimeInterval {
        min(maximumWait, max(1, expires.timeIntervalSince(now) - margin))
    }
}
