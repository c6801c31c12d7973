import Foundation
import OfflinePublish

extension AppStats {
    /// Adds what the publish directory says of the app now: its gray switch, its latest
    /// version and, on that version's entry when devices reported on it, the stage in
    /// force and whether it is halted, with the reason of the revision that halted it.
    mutating func apply(_ state: PublishState, now: Date) {
        rollout = state.rollout
        let latest = state.latest.description
        self.latest = latest
        guard let index = versions.firstIndex(where: { $0.version == latest }) else { return }
        let stage = state.stageInForce(at: now)
        versions[index].stage = stage
        versions[index].halted = stage == 0
        versions[index].reason = stage == 0 ? state.lastStageRevision.map { "\($0.verb) at \($0.time): \($0.reason)" } : nil
    }
}
