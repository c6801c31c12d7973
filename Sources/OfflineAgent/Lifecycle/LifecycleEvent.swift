import FoundationEssentials

/// One entry of an app's lifecycle history: when, from which version to which, and why.
public struct LifecycleEvent: Sendable, Equatable, Codable {
    /// What happened.
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// A sync installed a new version (on trial when one was asked for).
        case install
        /// The active version was confirmed (`mark-good`).
        case confirm = "mark-good"
        /// The active version was reported failing (`mark-bad`).
        case markBad = "mark-bad"
        /// A trial version reached its launch limit without a confirmation.
        case automaticRollback = "auto-rollback"
        /// `offline-agent rollback`.
        case rollback
        /// Syncs stopped changing the active version (`hold`).
        case hold
        /// Syncs may change the active version again (`unhold`).
        case unhold
        /// Bad marks were cleared by the operator (`forget-bad`).
        case forgetBad = "forget-bad"
    }

    /// When it happened.
    public var at: Date
    /// What happened.
    public var event: Kind
    /// The version active before (nil: none).
    public var from: Version?
    /// The version active after (nil: none is served offline).
    public var to: Version?
    /// Why, in words.
    public var reason: String

    /// A history entry.
    public init(at: Date, event: Kind, from: Version?, to: Version?, reason: String) {
        self.at = at
        self.event = event
        self.from = from
        self.to = to
        self.reason = reason
    }
}
