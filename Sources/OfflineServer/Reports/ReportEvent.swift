import Foundation
import OfflineAgent

/// One fleet report event as `POST /report` accepts it (docs/PROTOCOL.md, "Fleet
/// reports"), every field checked: a batch with one event that breaks a rule is
/// refused whole.
///
/// Unknown keys are ignored; `null` reads as absent; the `usage` fields are read for
/// `event: usage` only.
struct ReportEvent: Sendable, Decodable {
    /// The `event` values: the agent's own list, so sender and collector never drift.
    typealias Kind = OfflineAgent.ReportEvent.Kind

    var id: String
    /// As sent.
    var time: String
    /// `time` as milliseconds since 1970 (UTC): what "latest" is decided by.
    var timeMillis: Int64
    var device: String
    var app: String
    var event: ReportEvent.Kind
    var version: String?
    var previousVersion: String?
    var via: Via?
    var bytes: Int64
    var fullSize: Int64?
    var durationMs: Int64
    var errorCode: String?
    var message: String?
    // event: usage only
    var offlineHits: Int64?
    /// Reason → count; sorted by reason so storage is deterministic.
    var fallbacks: [(reason: String, count: Int64)]
    var periodSeconds: Int64?

    /// How an `updated` got its bytes.
    enum Via: String, Sendable { case patch, full }

    /// Most bytes of a string field, `message` excepted.
    static let maxString = 256
    /// Most bytes of `message`.
    static let maxMessage = 1024
    /// Most `fallbacks` reasons in one usage event.
    static let maxFallbackReasons = 64
    /// The largest integer a field may hold, 2^40 (a terabyte of bytes, 34 years of
    /// milliseconds): far above what a device measures, far enough below `Int64.max` that
    /// no single event comes near an overflow. Sums saturate all the same.
    static let maxInteger: Int64 = 1 << 40

    /// Bytes a patch saved this device: the full package's size less what was
    /// downloaded, for an `updated` event `via: patch` that says `fullSize`; else 0.
    var bytesSaved: Int64 {
        guard event == .updated, via == .patch, let fullSize, fullSize > bytes else { return 0 }
        return fullSize - bytes
    }

    /// A rollback away from `previousVersion`: `rolled-back`, or `marked-bad` (which rolls
    /// back to the previous good version, or to none). The one rule `/stats`, the
    /// dashboard, `--auto-halt` and `offline_server_report_rollbacks_total` count by.
    static func isRollback(_ kind: Kind) -> Bool { kind == .rolledBack || kind == .markedBad }

    var isRollback: Bool { Self.isRollback(event) }

    /// Where the event leaves the device, for "devices now": the version an `updated`
    /// installed, or the one a rollback went back to (`ReportRollup.none` for none); nil
    /// for an event that moves nothing.
    var position: String? {
        switch event {
        case .updated: version
        case .rolledBack, .markedBad: version ?? ReportRollup.none
        default: nil
        }
    }

    /// Fallbacks of all reasons.
    var fallbackTotal: Int64 { fallbacks.reduce(0) { $0.adding(saturating: $1.count) } }

    /// Reads and checks one event object; throws a `ReportRefusal` naming the rule it breaks.
    init(from decoder: any Decoder) throws {
        let reader = FieldReader(container: try Self.object(decoder))
        id = try reader.string(.id, required: true)!
        guard (8...64).contains(id.utf8.count), id.utf8.allSatisfy(Self.isIDByte) else {
            throw ReportRefusal("'id' must be 8 to 64 characters of A-Z a-z 0-9 _ -")
        }
        time = try reader.string(.time, required: true)!
        guard let date = RFC3339.date(from: time) else { throw ReportRefusal("'time' is not an RFC 3339 timestamp") }
        timeMillis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        device = try reader.string(.device, required: true)!
        app = try reader.string(.app, required: true)!
        guard AppName.isValid(app) else { throw ReportRefusal("'app' is not a valid app name") }
        let kind = try reader.string(.event, required: true)!
        guard let event = ReportEvent.Kind(rawValue: kind) else {
            throw ReportRefusal("'event' must be one of \(ReportEvent.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self.event = event
        version = try reader.string(.version)
        previousVersion = try reader.string(.previousVersion)
        if let text = try reader.string(.via) {
            guard let via = Via(rawValue: text) else { throw ReportRefusal("'via' must be patch or full") }
            self.via = via
        }
        bytes = try reader.integer(.bytes, required: true)!
        fullSize = try reader.integer(.fullSize)
        durationMs = try reader.integer(.durationMs, required: true)!
        errorCode = try reader.string(.errorCode)
        message = try reader.string(.message, limit: Self.maxMessage)
        fallbacks = []
        if event == .usage {
            offlineHits = try reader.integer(.offlineHits, required: true)!
            let period = try reader.integer(.periodSeconds, required: true)!
            guard period > 0 else { throw ReportRefusal("'periodSeconds' must be an integer above 0") }
            periodSeconds = period
            fallbacks = try reader.fallbacks()
        }
    }

    private enum Key: String, CodingKey {
        case id, time, device, app, event, version, previousVersion, via, bytes, fullSize, durationMs, errorCode, message
        case offlineHits, fallbacks, periodSeconds
    }

    private static func object(_ decoder: any Decoder) throws -> KeyedDecodingContainer<Key> {
        do {
            return try decoder.container(keyedBy: Key.self)
        } catch {
            throw ReportRefusal("not a JSON object")
        }
    }

    /// Whether `text` holds a control character (C0, DEL, C1: NUL, line breaks, tabs,
    /// escapes), which no field has a use for: PostgreSQL cannot store a NUL (it answered
    /// 503, so the device kept resending the batch), and a line break forges log lines.
    static func hasControl(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
    }

    /// Whether `text` holds a bidirectional control (U+061C, U+200E, U+200F,
    /// U+202A–U+202E, U+2066–U+2069), which reorders the text around it when shown: a
    /// version "U+202E 0.1.1" reads "1.1.0" on the dashboard, a row an operator takes for
    /// the real version's. No field but `message` (which no page shows) has a use for one.
    static func hasBidiControl(_ text: String) -> Bool {
        text.unicodeScalars.contains {
            $0.value == 0x061C || $0.value == 0x200E || $0.value == 0x200F || (0x202A...0x202E).contains($0.value)
                || (0x2066...0x2069).contains($0.value)
        }
    }

    private static func isIDByte(_ b: UInt8) -> Bool {
        (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || (b >= 48 && b <= 57) || b == 95 || b == 45
    }

    /// Typed, checked reads of one event object's fields (a wrong type is a refusal, not a decoding error).
    private struct FieldReader {
        let container: KeyedDecodingContainer<Key>

        func string(_ key: Key, required: Bool = false, limit: Int = ReportEvent.maxString) throws -> String? {
            let value: String?
            do {
                value = try container.decodeIfPresent(String.self, forKey: key)
            } catch {
                throw ReportRefusal("'\(key.rawValue)' must be a string")
            }
            guard let text = value else {
                if required { throw ReportRefusal("'\(key.rawValue)' is missing") }
                return nil
            }
            guard !text.isEmpty else { throw ReportRefusal("'\(key.rawValue)' is empty") }
            guard text.utf8.count <= limit else { throw ReportRefusal("'\(key.rawValue)' is longer than \(limit) bytes") }
            guard !ReportEvent.hasControl(text) else { throw ReportRefusal("'\(key.rawValue)' holds a control character") }
            guard key == .message || !ReportEvent.hasBidiControl(text) else {
                throw ReportRefusal("'\(key.rawValue)' holds a bidirectional control character")
            }
            return text
        }

        func integer(_ key: Key, required: Bool = false) throws -> Int64? {
            let value: Int64?
            do {
                value = try container.decodeIfPresent(Int64.self, forKey: key)
            } catch {
                throw ReportRefusal("'\(key.rawValue)' must be an integer of 0 or more")
            }
            guard let value else {
                if required { throw ReportRefusal("'\(key.rawValue)' is missing") }
                return nil
            }
            guard value >= 0 else { throw ReportRefusal("'\(key.rawValue)' must be an integer of 0 or more") }
            guard value <= ReportEvent.maxInteger else {
                throw ReportRefusal("'\(key.rawValue)' must be at most \(ReportEvent.maxInteger)")
            }
            return value
        }

        func fallbacks() throws -> [(reason: String, count: Int64)] {
            let reasons: [String: Int64]?
            do {
                reasons = try container.decodeIfPresent([String: Int64].self, forKey: .fallbacks)
            } catch {
                throw ReportRefusal("'fallbacks' must be an object of reason to integer count")
            }
            guard let reasons else { return [] }
            guard reasons.count <= ReportEvent.maxFallbackReasons else {
                throw ReportRefusal("'fallbacks' has more than \(ReportEvent.maxFallbackReasons) reasons")
            }
            var out: [(reason: String, count: Int64)] = []
            for (reason, count) in reasons.sorted(by: { $0.key < $1.key }) {
                guard !reason.isEmpty, reason.utf8.count <= ReportEvent.maxString else {
                    throw ReportRefusal("a 'fallbacks' reason is empty or longer than \(ReportEvent.maxString) bytes")
                }
                guard !ReportEvent.hasControl(reason) else { throw ReportRefusal("a 'fallbacks' reason holds a control character") }
                guard !ReportEvent.hasBidiControl(reason) else {
                    throw ReportRefusal("a 'fallbacks' reason holds a bidirectional control character")
                }
                guard count >= 0 else { throw ReportRefusal("'fallbacks' counts must be integers of 0 or more") }
                guard count <= ReportEvent.maxInteger else {
                    throw ReportRefusal("'fallbacks' counts must be at most \(ReportEvent.maxInteger)")
                }
                out.append((reason, count))
            }
            return out
        }
    }
}
