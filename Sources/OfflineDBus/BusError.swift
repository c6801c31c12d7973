import OfflineAgent

/// A D-Bus error reply: its name and one line for people.
struct BusError: Error, Sendable, Equatable, CustomStringConvertible {
    var name: String
    var message: String

    /// The error of a refused call: named after its PROTOCOL cause (`DBusNames.errorName`),
    /// the message starting with the cause code.
    init(_ error: OfflineAgentError) {
        name = DBusNames.errorName(error.cause)
        message = "\(error.cause.rawValue): \(error.reason)"
    }

    init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    var description: String { "\(name): \(message)" }

    /// Anything thrown, as an error reply.
    init(any error: any Error) {
        if let error = error as? OfflineAgentError { self.init(error) } else { self.init(OfflineAgentError(.install, "\(error)", cause: .unexpected)) }
    }

    /// An argument no caller may send (too long, not a URL, not a version).
    static func usage(_ reason: String) -> BusError { BusError(OfflineAgentError(.usage, reason, cause: .usage)) }

    /// The caller is not among the users and groups the config names for the app.
    static func accessDenied(_ reason: String) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: reason)
    }
}
