/// A method call, its arguments read and checked on the bus thread.
enum BusRequest: Sendable, Equatable {
    case getApp(name: String)
    case status(app: String?)
    case resolve(app: String, url: String)
    case resolveFile(app: String, url: String)
    case confirm(app: String, version: String)
    case reportBad(app: String, version: String, reason: String)
    case sync(app: String, force: Bool)

    /// The app a call changes (`Confirm`, `ReportBad`, `Sync`): only the users and groups
    /// the config names for it may make it. Nil for calls any local user may make.
    var guardedApp: String? {
        switch self {
        case .confirm(let app, _), .reportBad(let app, _, _), .sync(let app, _): app
        case .getApp, .status, .resolve, .resolveFile: nil
        }
    }
}
