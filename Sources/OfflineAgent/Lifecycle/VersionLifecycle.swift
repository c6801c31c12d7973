import FoundationEssentials

/// The lifecycle record of one app (`<root>/apps/<app>/lifecycle.json`): the state of
/// the version it names, the versions marked bad, the hold, and the history.
///
/// The record is kept beside the `current` link, not instead of it, and never has to
/// change in the same instant: `current` naming a version other than `version` means
/// a sync installed it since (a new trial), and `current` naming a bad version means a
/// rollback was recorded but not yet switched, so that version is not served until
/// the switch completes. Every state on disk is therefore one consistent state.
public struct VersionLifecycle: Sendable, Equatable, Codable {
    /// History entries kept (oldest dropped).
    public static let historyLimit = 100
    /// Bad versions remembered (oldest dropped; they are below the active one by then).
    public static let badLimit = 256
    /// Confirmed versions remembered, to restore `good` on a rollback to one.
    static let confirmedLimit = 16
    /// Longest reason kept, in characters.
    public static let reasonLimit = 500
    /// The launch limit of a trial recorded without one (roots from before trials were
    /// the publisher's call). New installs are on trial only when asked.
    public static let defaultMaxTrialLaunches = 3

    /// The version `state` and `launches` describe.
    public var version: Version?
    /// `trial` or `good` (bad versions live in `bad`).
    public var state: VersionState
    /// Unconfirmed launches of `version` while on trial.
    public var launches: Int
    /// The launch limit the installing sync was configured with.
    public var maxTrialLaunches: Int?
    /// Syncs leave the active version alone (`hold`).
    public var held: Bool
    /// Versions confirmed good, oldest first (the last `confirmedLimit`).
    public var confirmed: [Version]
    /// Versions never served nor installed again, oldest first.
    public var bad: [BadVersion]
    /// Transitions, oldest first (the last `historyLimit`).
    public var history: [LifecycleEvent]
    /// The state of the version the last install replaced: what a rollback to it restores.
    public var left: VersionSnapshot?

    /// The record of a root that had no lifecycle yet: an active version installed
    /// before the lifecycle was tracked is `good` (it has been in use).
    public init(legacyActive: Version?) {
        version = legacyActive
        state = .good
        launches = 0
        maxTrialLaunches = nil
        held = false
        confirmed = legacyActive.map { [$0] } ?? []
        bad = []
        history = []
        left = nil
    }

    /// True when `version` is marked bad.
    public func isBad(_ version: Version) -> Bool { bad.contains { $0.version == version } }

    /// The state of `active` as derived from this record (see the type's documentation).
    public func state(of active: Version) -> VersionState {
        if isBad(active) { return .bad }
        if version == active { return state }
        return confirmed.contains(active) ? .good : .trial
    }

    /// Unconfirmed launches of `active`.
    public func launches(of active: Version) -> Int {
        version == active && !isBad(active) ? launches : 0
    }

    // MARK: - Transitions

    /// Records a version that became active by an install: on trial for `trialLaunches`
    /// launches when the install asked for one (> 0), else good at once.
    mutating func adopt(_ active: Version?, trialLaunches: Int?, at now: Date) {
        guard let active, !isBad(active), version != active else { return }
        let trial = !confirmed.contains(active) && (trialLaunches ?? 0) > 0
        let reason = trial ? "installed by a sync, on trial for \(trialLaunches ?? 0) launches" : "installed by a sync"
        append(LifecycleEvent(at: now, event: .install, from: version, to: active, reason: reason))
        if let version, !isBad(version) {
            left = VersionSnapshot(version: version, state: state, launches: launches, maxTrialLaunches: maxTrialLaunches)
        }
        version = active
        launches = 0
        if trial {
            state = .trial
            maxTrialLaunches = trialLaunches
        } else {
            state = .good
            maxTrialLaunches = nil
            remember(active)
        }
    }

    /// Confirms `active`.
    mutating func confirm(_ active: Version, at now: Date) {
        if state(of: active) != .good {
            append(LifecycleEvent(at: now, event: .confirm, from: active, to: active, reason: "confirmed"))
        }
        version = active
        state = .good
        launches = 0
        remember(active)
    }

    private mutating func remember(_ good: Version) {
        confirmed.removeAll { $0 == good }
        confirmed.append(good)
        if confirmed.count > Self.confirmedLimit { confirmed.removeFirst(confirmed.count - Self.confirmedLimit) }
    }

    /// Clears the bad mark of `version`, or of every bad version when nil (`forget-bad`);
    /// returns the versions cleared. An active version cleared becomes good: the
    /// operator vouched for it.
    mutating func forgetBad(_ version: Version?, active: Version?, at now: Date) -> [Version] {
        let cleared = bad.map(\.version).filter { version == nil || $0 == version }
        guard !cleared.isEmpty else { return [] }
        bad.removeAll { cleared.contains($0.version) }
        let list = cleared.map(\.description).joined(separator: ", ")
        append(LifecycleEvent(at: now, event: .forgetBad, from: active, to: active, reason: "bad mark cleared: \(list)"))
        if let active, cleared.contains(active), self.version != active || state != .good {
            self.version = active
            state = .good
            launches = 0
            maxTrialLaunches = nil
            remember(active)
        }
        return cleared
    }

    /// Marks `active` bad; `target` (a kept version not marked bad, or nil) becomes the
    /// version the record describes, before `current` is switched to it.
    mutating func markBad(_ active: Version, target: Version?, event: LifecycleEvent.Kind, reason: String, at now: Date) {
        // One line, bounded: reasons come from pages and command lines.
        let reason = String(reason.split(whereSeparator: \.isNewline).joined(separator: " ").prefix(Self.reasonLimit))
        if !isBad(active) {
            bad.append(BadVersion(version: active, reason: reason, at: now))
            if bad.count > Self.badLimit { bad.removeFirst(bad.count - Self.badLimit) }
        }
        append(LifecycleEvent(at: now, event: event, from: active, to: target, reason: reason))
        version = target
        // The target returns in the state it had: a trial with the launches it used,
        // anything else good (a confirmed version, or one installed without a trial).
        if let target, let left, left.version == target, left.state == .trial, !confirmed.contains(target) {
            state = .trial
            launches = left.launches
            maxTrialLaunches = left.maxTrialLaunches
        } else {
            state = .good
            launches = 0
            maxTrialLaunches = nil
        }
        left = nil
    }

    /// Sets or clears the hold; false when nothing changed.
    mutating func setHeld(_ held: Bool, active: Version?, at now: Date) -> Bool {
        guard self.held != held else { return false }
        self.held = held
        append(LifecycleEvent(
            at: now, event: held ? .hold : .unhold, from: active, to: active,
            reason: held ? "syncs keep the active version" : "syncs may update again"))
        return true
    }

    /// What one launch of `active` does under `limit` (0: never roll back).
    mutating func launch(_ active: Version, limit: Int) -> LaunchDecision {
        switch state(of: active) {
        case .bad: return .bad
        case .good: return .confirmed
        case .trial: break
        }
        if version != active { adopt(active, trialLaunches: limit, at: Date()) }
        if limit > 0, launches >= limit { return .rollBack }
        launches += 1
        return .counted(launches)
    }

    enum LaunchDecision: Equatable {
        case bad, confirmed, rollBack
        case counted(Int)
    }

    private mutating func append(_ event: LifecycleEvent) {
        history.append(event)
        if history.count > Self.historyLimit { history.removeFirst(history.count - Self.historyLimit) }
    }
}
