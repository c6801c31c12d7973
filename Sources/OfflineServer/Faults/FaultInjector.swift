import Synchronization

/// The faults a server was started with, and how many matching requests each has left
/// (`*COUNT`). Thread-safe: requests on every connection claim from it.
final class FaultInjector: Sendable {
    let faults: [ServerFault]
    private let metrics: ReferenceServerMetrics
    /// Requests left per fault, by index; nil for no limit.
    private let remaining: Mutex<[Int?]>

    init(_ faults: [ServerFault], metrics: ReferenceServerMetrics) {
        self.faults = faults
        self.metrics = metrics
        self.remaining = Mutex(faults.map(\.count))
    }

    var isEmpty: Bool { faults.isEmpty }

    /// The faults of one stage (`body`: those acting on a body under way; else those acting
    /// before the head) that apply to a request of scope `scope`, each counted as injected
    /// and taken off its remaining count. Later faults of a stage are dropped after a `status`,
    /// which replaces the response; a `reset-after` of at least `bodyLength` bytes does not apply.
    func claim(scope: ServerFaultScope?, body: Bool, bodyLength: Int?) -> [ServerFault.Kind] {
        let claimed: [ServerFault.Kind] = remaining.withLock { remaining in
            var claimed: [ServerFault.Kind] = []
            for (index, fault) in faults.enumerated() where fault.kind.actsOnBody == body && fault.scope.covers(scope) {
                if case .resetAfter(let bytes) = fault.kind, bytes >= bodyLength ?? .max { continue }
                if let left = remaining[index] {
                    guard left > 0 else { continue }
                    remaining[index] = left - 1
                }
                claimed.append(fault.kind)
                if case .status = fault.kind { break }
            }
            return claimed
        }
        for kind in claimed { metrics.recordFault(kind.name, scope: scope) }
        return claimed
    }
}
