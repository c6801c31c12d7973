/// Which `app` and `version` label values the fleet counters may use: only apps of the
/// publish directory and versions it published get series of their own; any other
/// name counts as `other`. Devices choose these strings, so without the bound a few
/// requests with made-up names would grow `/metrics` for good (docs/PROTOCOL.md,
/// "Collector (offline-server)").
struct ReportLabels: Sendable {
    /// The versions published for an app (every one in its `state.json`); nil when the
    /// publish directory has no such app.
    let published: @Sendable (String) -> Set<String>?

    /// Labels every name as itself: for a server without a publish directory to ask (tests).
    static let unbounded = ReportLabels { _ in nil }

    init(published: @escaping @Sendable (String) -> Set<String>?) {
        self.published = published
    }

    /// The label value `other` stands for.
    static let other = "other"
}
