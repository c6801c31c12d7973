import ArgumentParser
import OfflineAgent
import OfflinePublish

/// How long a verb waits for another verb holding the app's publish lock.
struct LockOptions: ParsableArguments {
    @Option(help: "Seconds to wait for another verb on the same app to finish before giving up (exit 75, naming it).")
    var lockWait: Double = Double(PublishLock.defaultWait.components.seconds)

    /// `--lock-wait` as a duration; refuses a negative or non-finite number.
    func wait() throws -> Duration {
        guard lockWait.isFinite, (0...86_400).contains(lockWait) else {
            throw PublishError(.usage, "--lock-wait \(lockWait) is outside 0…86400 seconds")
        }
        return .milliseconds(Int64((lockWait * 1000).rounded()))
    }
}
