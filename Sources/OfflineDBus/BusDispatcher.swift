import COfflineSDBus
import Logging
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The bus thread's side of the service: owns the connection, reads calls, answers
/// property reads from the service's snapshots, sends replies and signals. Every member
/// is used on the bus thread only (the connection is not thread-safe); other threads
/// reach it through `BusLoop.enqueue`.
final class BusDispatcher {
    private let service: AgentBusService
    private let loop: BusLoop
    private let connection: BusConnection
    private let handlers: UnsafeMutablePointer<c_sdbus_handlers>
    /// Calls answered later, by number.
    private var pending: [UInt64: BusCall] = [:]
    private var nextCall: UInt64 = 0
    var stopped = false

    /// Connects, exports the objects and takes the bus name.
    init(service: AgentBusService, loop: BusLoop, system: Bool) throws(BusError) {
        self.service = service
        self.loop = loop
        connection = try BusConnection(system: system)
        handlers = .allocate(capacity: 1)
        handlers.initialize(to: c_sdbus_handlers(
            context: nil,
            method: { context, message, object, id, error in
                Unmanaged<BusDispatcher>.fromOpaque(context!).takeUnretainedValue().method(message, object, String(cString: id), error)
            },
            property: { context, reply, object, id, property, error in
                Unmanaged<BusDispatcher>.fromOpaque(context!).takeUnretainedValue()
                    .property(reply, object, String(cString: id), String(cString: property), error)
            },
            exists: { context, object, id in
                Unmanaged<BusDispatcher>.fromOpaque(context!).takeUnretainedValue().service.exists(object, String(cString: id)) ? 1 : 0
            },
            enumerate: { context, object, names in
                for id in Unmanaged<BusDispatcher>.fromOpaque(context!).takeUnretainedValue().service.ids(object) {
                    c_sdbus_names_add(names, id)
                }
            }))
        // Unretained: the connection, and with it the tables naming this context, is
        // closed in deinit, before this object is gone.
        handlers.pointee.context = Unmanaged.passUnretained(self).toOpaque()
        var r = c_sdbus_register(connection.bus, handlers)
        guard r >= 0 else { throw BusError(name: DBusNames.errorName(.unexpected), message: "cannot export the objects: \(Errno.describe(-r))") }
        r = c_sdbus_request_name(connection.bus, DBusNames.busName)
        guard r >= 0 else {
            let why = r == -EEXIST ? "another process owns it" : r == -EACCES ? "the bus policy does not let this user own it" : Errno.describe(-r)
            throw BusError(name: DBusNames.errorName(.busy), message: "cannot own \(DBusNames.busName): \(why)")
        }
    }

    deinit {
        pending = [:]
        _ = c_sdbus_flush(connection.bus)
        withExtendedLifetime(connection) {}
        handlers.deallocate()
    }

    // MARK: - The loop

    /// Processes the bus until `stopped` (a job sets it) or the connection is lost.
    func run(logger: Logger) {
        let bus = connection.bus
        while !stopped {
            for job in loop.takeJobs() { job(self) }
            if stopped { break }
            var r: Int32
            repeat { r = c_sdbus_process(bus) } while r > 0
            if r < 0 {
                logger.error("the D-Bus connection is lost: \(Errno.describe(-r))")
                break
            }
            var fds = [
                pollfd(fd: c_sdbus_fd(bus), events: Int16(truncatingIfNeeded: c_sdbus_events(bus)), revents: 0),
                pollfd(fd: loop.wakeFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: loop.inotifyFD, events: Int16(POLLIN), revents: 0),
            ]
            var deadline: UInt64 = .max
            _ = c_sdbus_timeout(bus, &deadline)
            _ = poll(&fds, nfds_t(fds.count), Self.milliseconds(until: deadline))
            if fds[1].revents != 0 { loop.clearWake() }
            if fds[2].revents != 0 {
                let events = loop.drainInotify()
                service.appsAppeared(events.created, rootChanged: events.full)
                if events.changed { service.rootChanged(full: events.full, apps: events.apps) }
                for app in events.progress { service.progressRecorded(app) }
            }
        }
        for (_, call) in pending { call.reply(.failure(BusError(name: DBusNames.errorName(.cancelled), message: "cancelled: the service is stopping"))) }
        pending = [:]
    }

    /// `poll`'s timeout for sd-bus's CLOCK_MONOTONIC deadline (at most a second).
    private static func milliseconds(until deadline: UInt64) -> Int32 {
        guard deadline != .max else { return 1000 }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicroseconds = UInt64(now.tv_sec) &* 1_000_000 &+ UInt64(now.tv_nsec / 1000)
        guard deadline > nowMicroseconds else { return 0 }
        return Int32(min(1000, (deadline - nowMicroseconds + 999) / 1000))
    }

    // MARK: - Calls

    private func method(_ message: OpaquePointer, _ object: Int32, _ id: String, _ error: UnsafeMutablePointer<sd_bus_error>) -> Int32 {
        let request: BusRequest
        switch Self.request(message, object: object, id: id) {
        case .success(let parsed): request = parsed
        case .failure(let refusal): return c_sdbus_set_error(error, refusal.name, refusal.message)
        }
        if let app = request.guardedApp {
            var uid: uid_t = 0
            var gids = [gid_t](repeating: 0, count: 64)
            var count: Int32 = 0
            let r = c_sdbus_sender(message, &uid, &gids, Int32(gids.count), &count)
            guard r >= 0 else {
                return c_sdbus_set_error(error, "org.freedesktop.DBus.Error.AccessDenied", "the caller's user cannot be read: \(Errno.describe(-r))")
            }
            guard service.allows(app: app, uid: uid, gids: Array(gids.prefix(Int(max(0, count))))) else {
                let refusal = BusError.accessDenied("user \(uid) may not change \(app): the config names the users and groups that may (dbusUsers, dbusGroups)")
                return c_sdbus_set_error(error, refusal.name, refusal.message)
            }
        }
        switch service.answer(request) {
        case .now(let result):
            BusCall(message).reply(result)
        case .later(let work):
            nextCall &+= 1
            let number = nextCall
            pending[number] = BusCall(message)
            let loop = loop
            Task {
                let result = await work()
                loop.enqueue { $0.finish(number, result) }
            }
        }
        return 1
    }

    private func finish(_ number: UInt64, _ result: Result<[BusValue], BusError>) {
        pending.removeValue(forKey: number)?.reply(result)
    }

    /// The longest string argument accepted (a URL; a version or an app name is far shorter).
    static let maxArgumentBytes = 8192

    /// Reads and checks a call's arguments; a malformed one is refused with `usage`.
    static func request(_ message: OpaquePointer, object: Int32, id: String) -> Result<BusRequest, BusError> {
        let member = c_sdbus_message_member(message).map { String(cString: $0) } ?? ""
        func string(_ name: String, max: Int = maxArgumentBytes) throws(BusError) -> String {
            var value: UnsafePointer<CChar>?
            guard c_sdbus_read_string(message, &value) >= 0, let value else { throw .usage("\(name) is missing") }
            let length = strnlen(value, max + 1)
            guard length <= max else { throw .usage("\(name) is longer than \(max) bytes") }
            return String(decoding: UnsafeRawBufferPointer(start: value, count: length), as: UTF8.self)
        }
        func bool(_ name: String) throws(BusError) -> Bool {
            var value: Int32 = 0
            guard c_sdbus_read_bool(message, &value) >= 0 else { throw .usage("\(name) is missing") }
            return value != 0
        }
        do throws(BusError) {
            switch (object, member) {
            case (Int32(C_SDBUS_MANAGER.rawValue), "GetApp"): return .success(.getApp(name: try string("name", max: 64)))
            case (Int32(C_SDBUS_MANAGER.rawValue), "Status"): return .success(.status(app: nil))
            case (Int32(C_SDBUS_APP.rawValue), "Status"): return .success(.status(app: id))
            case (Int32(C_SDBUS_APP.rawValue), "Resolve"): return .success(.resolve(app: id, url: try string("url")))
            case (Int32(C_SDBUS_APP.rawValue), "ResolveFile"): return .success(.resolveFile(app: id, url: try string("url")))
            case (Int32(C_SDBUS_APP.rawValue), "Confirm"): return .success(.confirm(app: id, version: try string("version", max: 64)))
            case (Int32(C_SDBUS_APP.rawValue), "ReportBad"):
                return .success(.reportBad(app: id, version: try string("version", max: 64), reason: try string("reason", max: 1024)))
            case (Int32(C_SDBUS_APP.rawValue), "Sync"): return .success(.sync(app: id, force: try bool("force")))
            default: return .failure(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member)"))
            }
        } catch {
            return .failure(error)
        }
    }

    // MARK: - Properties

    private func property(_ reply: OpaquePointer, _ object: Int32, _ id: String, _ name: String, _ error: UnsafeMutablePointer<sd_bus_error>) -> Int32 {
        guard let value = service.property(object, id, name) else {
            return c_sdbus_set_error(error, "org.freedesktop.DBus.Error.UnknownProperty", "no property \(name)")
        }
        let r = value.append(to: reply)
        return r < 0 ? r : 0
    }

    // MARK: - Sending

    /// Sends `signal` from the manager object.
    func emit(_ signal: BusSignal) {
        var message: OpaquePointer?
        guard c_sdbus_new_signal(connection.bus, DBusNames.managerPath, DBusNames.managerInterface, signal.member, &message) >= 0,
              let message else { return }
        defer { c_sdbus_message_unref(message) }
        for argument in signal.arguments where argument.append(to: message) < 0 { return }
        _ = c_sdbus_send(message)
    }

    /// Sends PropertiesChanged (with the new values) for `names` of `interface` at `path`.
    func propertiesChanged(path: String, interface: String, names: [String]) {
        guard !names.isEmpty else { return }
        var strings: [UnsafeMutablePointer<CChar>?] = names.map { strdup($0) } + [nil]
        defer { for string in strings { free(string) } }
        _ = c_sdbus_properties_changed(connection.bus, path, interface, &strings)
    }
}
