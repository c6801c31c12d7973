/// Why `POST /report` refused a batch: the one-line reason of its `400` (or `413`).
///
/// The whole batch is refused for one bad event, so the sender drops it instead of
/// retrying it forever (docs/PROTOCOL.md, "Fleet reports").
struct ReportRefusal: Error, Sendable, CustomStringConvertible {
    /// One line, no trailing line feed.
    var reason: String
    /// `413` when the body is over the cap, else `400`.
    var tooLarge = false

    init(_ reason: String, tooLarge: Bool = false) {
        self.reason = reason
        self.tooLarge = tooLarge
    }

    var description: String { reason }
}
