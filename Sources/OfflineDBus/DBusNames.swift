import OfflineAgent

/// The agent's names on the bus (docs/DBUS.md; the tables are in `COfflineSDBus`).
public enum DBusNames {
    /// The well-known bus name the service owns.
    public static let busName = "org.offlineagent.Agent1"
    /// The manager object: the apps, `Status()`, and every signal.
    public static let managerPath = "/org/offlineagent/Agent1"
    /// Apps are `<appPrefix>/<escaped name>` (`appPath(_:)`).
    public static let appPrefix = managerPath + "/app"
    /// Sync jobs are `<jobPrefix>/<n>`.
    public static let jobPrefix = managerPath + "/job"
    /// The manager's interface.
    public static let managerInterface = busName + ".Manager"
    /// Each app's interface.
    public static let appInterface = busName + ".App"
    /// Each sync job's interface.
    public static let jobInterface = busName + ".Job"
    /// Errors are `<errorPrefix><Cause>`, the PROTOCOL cause code in camel case
    /// (`state-invalid` is `org.offlineagent.Agent1.Error.StateInvalid`).
    public static let errorPrefix = busName + ".Error."

    /// The D-Bus error name of a PROTOCOL cause code.
    public static func errorName(_ cause: OfflineAgentError.Cause) -> String {
        errorPrefix + cause.rawValue.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    /// The object path of `app`: its name escaped as sd-bus escapes a path label
    /// (`sd_bus_path_encode`): every byte but ASCII letters, and digits after the first
    /// byte, becomes `_` and two lower-case hex digits (`mall-2` is `mall_2d2`).
    public static func appPath(_ app: String) -> String {
        appPrefix + "/" + escape(app)
    }

    /// The object path of job `number`.
    public static func jobPath(_ number: UInt64) -> String {
        jobPrefix + "/" + escape(String(number))
    }

    static func escape(_ label: String) -> String {
        guard !label.isEmpty else { return "_" }
        var escaped = ""
        for (index, byte) in label.utf8.enumerated() {
            let letter = (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122)
            let digit = byte >= 48 && byte <= 57
            if letter || (digit && index > 0) {
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = Array("0123456789abcdef")
                escaped += "_\(hex[Int(byte >> 4)])\(hex[Int(byte & 15)])"
            }
        }
        return escaped
    }
}
