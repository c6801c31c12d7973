/// Which keys sign a role, and how many of them must: `{"keyids": [...], "threshold": N}`.
package struct TUFRole: Sendable, Equatable {
    package let keyIDs: [String]
    package let threshold: Int

    package init(keyIDs: [String], threshold: Int) {
        self.keyIDs = keyIDs
        self.threshold = threshold
    }

    /// Reads a role object; key ids are opaque strings and must not repeat.
    package init(_ fields: TUFFields) throws {
        keyIDs = try fields.strings("keyids")
        guard Set(keyIDs).count == keyIDs.count else { throw TUFKey.invalid("\(fields.context).keyids repeats a key id") }
        threshold = Int(try fields.integer("threshold", in: 1...Int64(Int32.max)))
    }

    package var json: StrictJSON {
        .object(["keyids": .array(keyIDs.map(StrictJSON.string)), "threshold": .number(String(threshold))])
    }
}
