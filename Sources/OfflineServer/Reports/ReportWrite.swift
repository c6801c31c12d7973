/// One checked batch of events as a store takes it, with whether a device's own
/// credential sent it (only those count toward `--auto-halt` with enrolment required).
struct ReportWrite: Sendable {
    var events: [ReportEvent]
    var authenticated: Bool
}
