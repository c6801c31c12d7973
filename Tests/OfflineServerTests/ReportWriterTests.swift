import Foundation
@testable import OfflineServer
import TestSupport
import Testing

/// `ReportWriter` against a store that records each transaction: batches that arrive
/// while one is written go into the next transaction together, each gets its own
/// insertion, and a transaction that fails fails every batch in it and no other.
@Suite("Fleet reports: concurrent batches share a transaction")
struct ReportWriterTests {
    typealias C = FleetReportClient

    /// A store whose first transaction waits until `open()`; it stores every id once and
    /// refuses a transaction holding an event of device `refuse`.
    final class GatedStore: ReportStorage, @unchecked Sendable {
        let location = "gated"
        private let lock = NSLock()
        private var gate: CheckedContinuation<Void, Never>?
        private var opened = false
        private var ids = Set<String>()
        private(set) var transactions: [[Int]] = []

        func open() {
            let waiting = lock.withLock {
                opened = true
                defer { gate = nil }
                return gate
            }
            waiting?.resume()
        }

        func insert(_ writes: [ReportWrite]) async throws -> [ReportInsertion] {
            await withCheckedContinuation { continuation in
                let pass = lock.withLock {
                    if !opened { gate = continuation }
                    return opened
                }
                if pass { continuation.resume() }
            }
            return try lock.withLock {
                transactions.append(writes.map(\.events.count))
                if writes.contains(where: { $0.events.contains { $0.device == "refuse" } }) {
                    throw ReportRefusal("refused on purpose")
                }
                return writes.map { write in
                    var insertion = ReportInsertion(inserted: [], duplicates: 0)
                    for event in write.events {
                        if ids.insert(event.id).inserted { insertion.inserted.append(event) } else { insertion.duplicates += 1 }
                    }
                    return insertion
                }
            }
        }

        /// Whether a transaction waits at the gate.
        var holding: Bool { lock.withLock { gate != nil } }

        func tally(labels: ReportLabels) async throws -> ReportTally { ReportTally(labels: labels) }
        func stats(app: String, keeping latest: String?) async throws -> AppStats { AppStats(app: app) }
        func rolloutDevices(app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool) async throws -> [RolloutFigures.Device] { [] }
        func knownDevices(app: String) async throws -> Int64 { 0 }
        func adoption(app: String, versions: [String]) async throws -> AdoptionSeries { AdoptionSeries() }
        func enrol(device: String, fingerprint: String, nowMillis: Int64) async throws -> Bool { true }
        func adoptEnrolments(fingerprint: String) async throws {}
        func releaseEnrolment(device: String) async throws -> Bool { false }
        func close() async {}
    }

    static func write(_ events: [[String: Any]]) throws -> ReportWrite {
        ReportWrite(events: try ReportBatch(body: [UInt8](try C.body(events))).events, authenticated: false)
    }

    /// Waits (bounded) until a transaction is held at the gate and `count` batches wait behind it.
    static func waitFor(_ writer: ReportWriter, _ store: GatedStore, waiting count: Int) async throws {
        for _ in 0..<3000 {
            if store.holding, await writer.waitingCount == count { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("no transaction held with \(count) batches waiting")
    }

    @Test("20 batches sent while a transaction is written go into the next one together; each counts its own events and duplicates")
    func sharedTransaction() async throws {
        let store = GatedStore()
        let writer = ReportWriter(store: store)
        let shared = C.event("updated", device: "d-0", version: "2.0.0")
        let writes = try (0..<21).map { index in
            // Every batch but the first repeats one event of the first.
            try Self.write((0..<3).map { C.event("updated", device: "d-\(index)-\($0)", version: "2.0.0") } + [shared])
        }
        let first = Task { try await writer.insert(writes[0]) }
        try await Self.waitFor(writer, store, waiting: 0)
        let rest = writes.dropFirst().map { write in Task { try await writer.insert(write) } }
        try await Self.waitFor(writer, store, waiting: 20)
        store.open()
        let firstInsertion = try await first.value
        #expect(firstInsertion.inserted.count == 4 && firstInsertion.duplicates == 0)
        for task in rest {
            let insertion = try await task.value
            #expect(insertion.inserted.count == 3 && insertion.duplicates == 1)
        }
        #expect(store.transactions == [[4], Array(repeating: 4, count: 20)])
    }

    @Test("a transaction that fails fails every batch in it, and the next transaction stores")
    func failedTransaction() async throws {
        let store = GatedStore()
        let writer = ReportWriter(store: store)
        let held = Task { try await writer.insert(try Self.write([C.event("updated", device: "held", version: "2.0.0")])) }
        try await Self.waitFor(writer, store, waiting: 0)
        let bad = Task { try await writer.insert(try Self.write([C.event("updated", device: "refuse", version: "2.0.0")])) }
        let good = Task { try await writer.insert(try Self.write([C.event("updated", device: "good", version: "2.0.0")])) }
        try await Self.waitFor(writer, store, waiting: 2)
        store.open()
        #expect(try await held.value.inserted.count == 1)
        await #expect(throws: ReportRefusal.self) { try await bad.value }
        await #expect(throws: ReportRefusal.self) { try await good.value }
        let again = try await writer.insert(try Self.write([C.event("updated", device: "good", version: "2.0.0")]))
        #expect(again.inserted.count == 1)
        #expect(store.transactions == [[1], [1, 1], [1]])
    }
}
