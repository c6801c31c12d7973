/// `ReportLabels` answered once per app during one tally, so counting a million stored
/// events reads each app's state once.
struct ReportLabelCache: Sendable {
    let labels: ReportLabels
    private var versions: [String: Set<String>?] = [:]

    init(_ labels: ReportLabels) { self.labels = labels }

    /// `app` when the publish directory has it, else `other`.
    mutating func app(_ app: String) -> String {
        known(app) == nil ? ReportLabels.other : app
    }

    /// `version` when the publish directory published it for `app`; `unknown` when
    /// absent; else `other`.
    mutating func version(_ version: String?, app: String) -> String {
        guard let version else { return "unknown" }
        guard let published = known(app), published.contains(version) else { return ReportLabels.other }
        return version
    }

    private mutating func known(_ app: String) -> Set<String>? {
        if let cached = versions[app] { return cached }
        let answer = labels.published(app)
        versions[app] = .some(answer)
        return answer
    }
}
