import COfflineSDBus

/// One sd-bus connection, owned by the thread that opened it (`BusLoop`): sd-bus
/// connections are not thread-safe, so this type is not `Sendable`. Releasing it flushes
/// what is queued and closes the connection, with the objects registered on it.
final class BusConnection {
    let bus: OpaquePointer

    /// Opens the system or the session bus.
    init(system: Bool) throws(BusError) {
        var reason: UnsafePointer<CChar>?
        guard c_sdbus_load(&reason) == 0 else {
            throw BusError(name: DBusNames.errorName(.unexpected), message: reason.map { String(cString: $0) } ?? "cannot load libsystemd")
        }
        var bus: OpaquePointer?
        let r = c_sdbus_open(system ? 1 : 0, &bus)
        guard r >= 0, let bus else {
            throw BusError(name: DBusNames.errorName(.unexpected), message: "cannot connect to the \(system ? "system" : "session") bus: \(Errno.describe(-r))")
        }
        self.bus = bus
    }

    deinit {
        c_sdbus_close(bus)
    }
}
