/// Where an installed version stands in its lifecycle (`status --json` `state`).
public enum VersionState: String, Sendable, Codable, CaseIterable {
    /// Installed and not yet confirmed: launches are counted, and too many without a
    /// confirmation roll it back.
    case trial
    /// Confirmed working (`mark-good`), or installed before the lifecycle was tracked.
    case good
    /// Reported failing or rolled back from: never served offline, never installed again.
    case bad
}
