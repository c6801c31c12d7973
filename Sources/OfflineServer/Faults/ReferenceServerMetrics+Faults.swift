extension ReferenceServerMetrics {
    static let faultsName = "offline_server_faults_total"

    /// Counts one fault injected (`offline-server --fault`) into a request of `scope`
    /// (nil: a path of none of the four kinds, labelled `other`).
    func recordFault(_ fault: String, scope: ServerFaultScope?) {
        registry.counter(Self.faultsName, [("fault", fault), ("scope", scope?.rawValue ?? "other")]).increment()
    }

    /// Faults of this name (`latency`, `status`, `truncate`, `corrupt`, `reset-after`,
    /// `stall`) injected into requests of `scope`.
    public func faults(_ fault: String, scope: ServerFaultScope) -> Int {
        Int(registry.value(Self.faultsName, [("fault", fault), ("scope", scope.rawValue)]))
    }
}
