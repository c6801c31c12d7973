/// The `event` of a fleet report event: what happened on the device.
enum ReportEventKind: String, Sendable, CaseIterable {
    case updated
    case failed
    case deferred
    case rolledBack = "rolled-back"
    case markedGood = "marked-good"
    case markedBad = "marked-bad"
    case usage
}
