/// A signal of the manager object (docs/DBUS.md, "Signals").
struct BusSignal: Sendable, Equatable {
    var member: String
    var arguments: [BusValue]

    static func versionInstalled(app: String, version: String, previous: String) -> BusSignal {
        BusSignal(member: "VersionInstalled", arguments: [.string(app), .string(version), .string(previous)])
    }

    static func rolledBack(app: String, from: String, to: String, reason: String) -> BusSignal {
        BusSignal(member: "RolledBack", arguments: [.string(app), .string(from), .string(to), .string(reason)])
    }

    static func progress(app: String, phase: String, bytes: Int64, total: Int64) -> BusSignal {
        progress(app: app, phase: phase, bytes: UInt64(clamping: bytes), total: UInt64(clamping: total))
    }

    static func progress(app: String, phase: String, bytes: UInt64, total: UInt64) -> BusSignal {
        BusSignal(member: "Progress", arguments: [.string(app), .string(phase), .uint64(bytes), .uint64(total)])
    }

    static func syncFinished(app: String, outcome: String, errorCode: String, job: String) -> BusSignal {
        BusSignal(member: "SyncFinished", arguments: [.string(app), .string(outcome), .string(errorCode), .path(job)])
    }
}
