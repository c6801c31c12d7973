import COfflineSDBus

/// A value the service sends: a property, a reply argument, a signal argument.
enum BusValue: Sendable, Equatable {
    case string(String)
    case path(String)
    case bool(Bool)
    case uint32(UInt32)
    case uint64(UInt64)
    case strings([String])
    case paths([String])
    /// A file descriptor (type `h`), owned by the value's reply: `BusCall.reply` closes it.
    case file(Int32)

    /// Appends the value to `message`; 0 or a negative errno.
    func append(to message: OpaquePointer) -> Int32 {
        switch self {
        case .string(let value): return c_sdbus_append_string(message, value)
        case .path(let value): return c_sdbus_append_path(message, value)
        case .bool(let value): return c_sdbus_append_bool(message, value ? 1 : 0)
        case .uint32(let value): return c_sdbus_append_u32(message, value)
        case .uint64(let value): return c_sdbus_append_u64(message, value)
        case .strings(let values): return Self.appendArray(values, of: "s", to: message, c_sdbus_append_string)
        case .paths(let values): return Self.appendArray(values, of: "o", to: message, c_sdbus_append_path)
        case .file(let fd): return c_sdbus_append_fd(message, fd)
        }
    }

    private static func appendArray(
        _ values: [String], of type: String, to message: OpaquePointer,
        _ element: (OpaquePointer, UnsafePointer<CChar>) -> Int32
    ) -> Int32 {
        var r = c_sdbus_open_array(message, type)
        for value in values where r >= 0 { r = element(message, value) }
        return r < 0 ? r : c_sdbus_close_container(message)
    }
}
