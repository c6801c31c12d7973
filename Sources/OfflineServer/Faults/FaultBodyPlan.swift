/// What the body faults claimed for one response do to its `length` bytes of body.
struct FaultBodyPlan: Sendable {
    /// Bytes sent before the connection is closed; nil: the whole body.
    var cut: Int?
    /// The close at `cut` is a TCP reset (`reset-after`), not an orderly close (`truncate`).
    var reset = false
    /// The body offset whose byte is inverted (`corrupt`).
    var corruptAt: Int?
    /// The body offset where the body pauses, and for how long (`stall`).
    var stall: (at: Int, duration: Duration)?

    init(_ kinds: [ServerFault.Kind], length: Int) {
        for kind in kinds {
            switch kind {
            case .truncate(let fraction):
                let bytes = min(length - 1, Int((Double(length) * fraction).rounded(.down)))
                if bytes < cut ?? .max { (cut, reset) = (bytes, false) }
            case .resetAfter(let bytes):
                if bytes < min(length, cut ?? .max) { (cut, reset) = (bytes, true) }
            case .corrupt:
                corruptAt = length / 2
            case .stall(let duration):
                stall = (length / 2, duration)
            case .latency, .status:
                break
            }
        }
    }
}
