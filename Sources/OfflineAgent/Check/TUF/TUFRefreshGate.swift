/// One metadata refresh at a time per repository store in this process: apps of one
/// repository synced together (a batch runs up to four at once under one root lock)
/// share the refresh in flight instead of racing to write the same files, where a
/// slower one could put back a timestamp older than one the other accepted.
actor TUFRefreshGate {
    static let shared = TUFRefreshGate()

    private var running: [String: Task<TUFTrustedSet, any Error>] = [:]

    func refresh(_ client: TUFClient) async throws -> TUFTrustedSet {
        let key = client.store.directory
        if let task = running[key] { return try await task.value }
        let task = Task { try await client.refresh() }
        running[key] = task
        defer { running[key] = nil }
        return try await task.value
    }
}
