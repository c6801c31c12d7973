import Foundation

/// The body of `POST /report`: `{"events":[EVENT, ...]}`, 1 to `maxEvents` events,
/// at most `maxBodyBytes`; other top-level keys are ignored.
struct ReportBatch: Sendable, Decodable {
    /// The cap on a body; more is `413`.
    static let maxBodyBytes = 1 << 20
    /// Most events in one batch.
    static let maxEvents = 500
    /// Most distinct apps, and most distinct version names (`version` and
    /// `previousVersion`), one batch may name: a device's queue names a few; a batch of
    /// made-up names, each a row of the running sums for good, is refused.
    static let maxApps = 16
    static let maxVersions = 64

    var events: [ReportEvent]

    /// Parses and checks a whole body; the reason names the first event that breaks a rule.
    init(body: some Collection<UInt8>) throws(ReportRefusal) {
        guard body.count <= Self.maxBodyBytes else {
            throw ReportRefusal("body over \(Self.maxBodyBytes) bytes", tooLarge: true)
        }
        do {
            self = try JSONDecoder().decode(ReportBatch.self, from: Data(body))
        } catch let refusal as ReportRefusal {
            throw refusal
        } catch {
            throw ReportRefusal("body is not JSON")
        }
    }

    private enum Key: String, CodingKey { case events }

    init(from decoder: any Decoder) throws {
        guard let object = try? decoder.container(keyedBy: Key.self) else { throw ReportRefusal("body is not a JSON object") }
        guard object.contains(.events) else { throw ReportRefusal("'events' is missing") }
        guard var list = try? object.nestedUnkeyedContainer(forKey: .events) else {
            throw ReportRefusal("'events' must be an array")
        }
        guard let count = list.count, (1...Self.maxEvents).contains(count) else {
            throw ReportRefusal("'events' must hold 1 to \(Self.maxEvents) events")
        }
        var events: [ReportEvent] = []
        events.reserveCapacity(count)
        while !list.isAtEnd {
            do {
                events.append(try list.decode(ReportEvent.self))
            } catch let refusal as ReportRefusal {
                throw ReportRefusal("event \(events.count): \(refusal.reason)")
            } catch {
                throw ReportRefusal("event \(events.count): not a valid event")
            }
        }
        guard Set(events.map(\.app)).count <= Self.maxApps else {
            throw ReportRefusal("the batch names more than \(Self.maxApps) apps")
        }
        // Distinct by bytes, as the database keys rows: a Set<String> takes canonically
        // equal spellings (K and the Kelvin sign U+212A) for one name.
        guard Set(events.flatMap { [$0.version, $0.previousVersion].compactMap { $0.map { Array($0.utf8) } } }).count <= Self.maxVersions else {
            throw ReportRefusal("the batch names more than \(Self.maxVersions) versions")
        }
        self.events = events
    }
}
