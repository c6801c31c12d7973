import FoundationEssentials

/// One fleet-report event, as the collector receives it (docs/PROTOCOL.md, "Fleet reports").
///
/// Strings are cut to the wire format's limits (256 bytes, `message` 1024) at a
/// character boundary, control characters become spaces and an empty optional string is
/// left out, so a long or odd error reason (a page's `mark-bad?reason=a%00b`) never makes
/// the collector refuse a batch.
public struct ReportEvent: Sendable, Equatable, Codable {
    /// What happened.
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// A sync installed a new version (`via` says how).
        case updated
        /// A sync failed; `errorCode` is the `OfflineAgentError.Cause`.
        case failed
        /// The manifest wants an unmetered network and the device is on a metered one.
        case deferred
        /// A version was rolled back (`rollback`, or a trial out of launches).
        case rolledBack = "rolled-back"
        /// The active version was confirmed.
        case markedGood = "marked-good"
        /// The active version was reported failing.
        case markedBad = "marked-bad"
        /// `serve`'s counters over `periodSeconds`.
        case usage
    }

    /// The de-duplication key: 32 random lowercase hex digits.
    public var id: String
    /// When it happened, RFC 3339 UTC.
    public var time: String
    /// The root's device id.
    public var device: String
    /// The app concerned.
    public var app: String
    /// What happened.
    public var event: Kind
    /// The version active after the event (the version concerned).
    public var version: String?
    /// The version active before the event.
    public var previousVersion: String?
    /// `patch` or `full`, for `updated`.
    public var via: String?
    /// Package bytes downloaded by the sync (0 if none).
    public var bytes: Int64
    /// The manifest's full package size, when a manifest offered an update.
    public var fullSize: Int64?
    /// How long the sync took, in milliseconds (0 for lifecycle events).
    public var durationMs: Int64
    /// The failure's cause code.
    public var errorCode: String?
    /// A one-line reason.
    public var message: String?
    /// `usage`: URLs opened offline in the period.
    public var offlineHits: Int?
    /// `usage`: URLs sent to the network in the period, by `FallbackReason` raw value.
    public var fallbacks: [String: Int]?
    /// `usage`: the period's length in seconds.
    public var periodSeconds: Int?

    /// An event with a fresh random id.
    public init(
        time: Date, device: String, app: String, event: Kind, version: String? = nil, previousVersion: String? = nil,
        via: String? = nil, bytes: Int64 = 0, fullSize: Int64? = nil, durationMs: Int64 = 0, errorCode: String? = nil,
        message: String? = nil, offlineHits: Int? = nil, fallbacks: [String: Int]? = nil, periodSeconds: Int? = nil
    ) {
        self.id = Self.newID()
        self.time = RFC3339.string(from: time)
        self.device = Self.clean(device, 256)
        self.app = Self.clean(app, 256)
        self.event = event
        self.version = version.flatMap { Self.present(Self.clean($0, 256)) }
        self.previousVersion = previousVersion.flatMap { Self.present(Self.clean($0, 256)) }
        self.via = via
        self.bytes = max(0, bytes)
        self.fullSize = fullSize.map { max(0, $0) }
        self.durationMs = max(0, durationMs)
        self.errorCode = errorCode.flatMap { Self.present(Self.clean($0, 256)) }
        self.message = message.flatMap { Self.present(Self.clean($0, 1024)) }
        self.offlineHits = offlineHits
        self.fallbacks = fallbacks
        self.periodSeconds = periodSeconds
    }

    /// 16 random bytes as 32 lowercase hex digits.
    static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }.hex
    }

    /// `text` with every control character (C0, DEL, C1: line breaks, tabs, NUL) and line or
    /// paragraph separator as a space, cut to `limit` bytes: the collector refuses a string
    /// holding a control character, and every string is one line.
    static func clean(_ text: String, _ limit: Int) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .lineSeparator, .paragraphSeparator: scalars.append(" ")
            default: scalars.append(scalar)
            }
        }
        return cut(String(scalars), limit)
    }

    /// nil for an empty string: the wire format refuses one.
    private static func present(_ text: String) -> String? { text.isEmpty ? nil : text }

    /// `text` cut to at most `limit` UTF-8 bytes, whole characters only.
    static func cut(_ text: String, _ limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var result = ""
        var bytes = 0
        for character in text {
            let size = character.utf8.count
            guard bytes + size <= limit else { break }
            result.append(character)
            bytes += size
        }
        return result
    }

    /// The event as one line of JSON (keys sorted, so the queue's bytes are stable).
    func line() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(self))
    }
}
