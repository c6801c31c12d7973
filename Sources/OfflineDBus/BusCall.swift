import COfflineSDBus
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// A method call answered later: holds a reference to the call message, released with
/// this value. Lives on the bus thread only, like the connection the message belongs to.
final class BusCall {
    let message: OpaquePointer

    init(_ message: OpaquePointer) {
        self.message = c_sdbus_message_ref(message)
    }

    /// Answers with `values` (the method's out arguments, in order) or an error. A file
    /// descriptor among `values` is closed here, sent or not (the reply sends a duplicate).
    func reply(_ result: Result<[BusValue], BusError>) {
        switch result {
        case .success(let values):
            defer { for case .file(let fd) in values { close(fd) } }
            var reply: OpaquePointer?
            guard c_sdbus_new_return(message, &reply) >= 0, let reply else { return }
            defer { c_sdbus_message_unref(reply) }
            for value in values where value.append(to: reply) < 0 { return }
            _ = c_sdbus_send(reply)
        case .failure(let error):
            _ = c_sdbus_reply_error(message, error.name, error.message)
        }
    }

    deinit {
        c_sdbus_message_unref(message)
    }
}
