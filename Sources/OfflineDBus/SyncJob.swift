/// A sync started by the `Sync` method: its job object's properties.
struct SyncJob: Sendable, Equatable {
    var number: UInt64
    var app: String
    var finished = false
    /// The sync's result (`updated`, `up-to-date`, `failed`, …); empty while it runs.
    var outcome = ""
    /// The PROTOCOL cause of a failure; empty otherwise.
    var errorCode = ""

    var path: String { DBusNames.jobPath(number) }

    func property(_ property: String) -> BusValue? {
        switch property {
        case "App": .string(app)
        case "Finished": .bool(finished)
        case "Outcome": .string(outcome)
        case "ErrorCode": .string(errorCode)
        default: nil
        }
    }
}
