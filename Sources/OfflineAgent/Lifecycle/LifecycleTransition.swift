/// What a rollback (`mark-bad`, `rollback`, an automatic rollback) did.
public struct LifecycleTransition: Sendable, Equatable {
    /// The app.
    public var app: String
    /// The version marked bad.
    public var from: Version
    /// The version active now; nil when none is left and the app loads from the network.
    public var to: Version?
    /// False when another run held the root's lock: the version is marked bad (and so
    /// not served offline) at once, and the switch to `to` completes at the next
    /// launch or sync.
    public var switched: Bool
}
