import ArgumentParser
import FoundationEssentials
import OfflineAgent

/// One history entry in JSON (`history --json`, `status --json`): at, event, from, to, reason.
struct LifecycleEventJSON: Encodable {
    var event: LifecycleEvent

    init(_ event: LifecycleEvent) { self.event = event }

    private enum CodingKeys: String, CodingKey { case at, event, from, to, reason }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(RFC3339.string(from: event.at), forKey: .at)
        try c.encode(event.event.rawValue, forKey: .event)
        // null rather than absent: "none" is a value here.
        try c.encode(event.from?.description, forKey: .from)
        try c.encode(event.to?.description, forKey: .to)
        try c.encode(event.reason, forKey: .reason)
    }
}
