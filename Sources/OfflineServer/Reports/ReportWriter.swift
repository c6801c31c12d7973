/// Writes the batches of `POST /report`s that arrive together in one transaction of the
/// store: while a transaction is being written, the batches that come in wait, and the
/// next transaction takes them all (up to `maxEvents`). A device's batch of 10 events
/// then shares its commit with the others instead of paying one of its own: on
/// PostgreSQL every batch adds to the same per-version sums, whose row a transaction
/// holds until its commit is on disk, so one commit per batch made the whole collector
/// wait on the disk once per batch.
///
/// A transaction is stored whole or not at all: when it fails, every batch in it gets the
/// error (the devices send them again; nothing of them is stored). Every batch is checked
/// before it gets here (`ReportBatch`), so what reaches the store can be stored.
actor ReportWriter {
    /// Most events one transaction takes (at least one batch, whatever its size).
    static let maxEvents = 5000

    private let store: any ReportStorage
    private var waiting: [(write: ReportWrite, reply: CheckedContinuation<ReportInsertion, any Error>)] = []
    private var writing = false

    init(store: any ReportStorage) {
        self.store = store
    }

    /// Batches waiting for the next transaction.
    var waitingCount: Int { waiting.count }

    /// Stores `write` with the batches that arrive with it; what it did to the store.
    func insert(_ write: ReportWrite) async throws -> ReportInsertion {
        try await withCheckedThrowingContinuation { reply in
            waiting.append((write, reply))
            guard !writing else { return }
            writing = true
            Task { await self.drain() }
        }
    }

    /// Writes what is waiting, a transaction at a time, until nothing is.
    private func drain() async {
        while !waiting.isEmpty {
            var count = 0, taken = 0
            while taken < waiting.count, taken == 0 || count + waiting[taken].write.events.count <= Self.maxEvents {
                count += waiting[taken].write.events.count
                taken += 1
            }
            let group = Array(waiting.prefix(taken))
            waiting.removeFirst(taken)
            do {
                let insertions = try await store.insert(group.map(\.write))
                for (member, insertion) in zip(group, insertions) { member.reply.resume(returning: insertion) }
            } catch {
                for member in group { member.reply.resume(throwing: error) }
            }
        }
        writing = false
    }
}
