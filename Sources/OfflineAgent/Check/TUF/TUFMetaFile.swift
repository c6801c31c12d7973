/// What timestamp says of snapshot, and snapshot of each targets role: `{"version":
/// N, "length": L, "hashes": {...}}`, length and hashes optional.
package struct TUFMetaFile: Sendable, Equatable {
    package let version: Int64
    package let length: Int64?
    package let hashes: [String: String]?

    package init(version: Int64, length: Int64? = nil, hashes: [String: String]? = nil) {
        self.version = version
        self.length = length
        self.hashes = hashes
    }

    package init(_ fields: TUFFields) throws {
        version = try fields.integer("version", in: 1...Int64.max)
        length = try fields.optionalInteger("length", in: 0...Int64.max)
        hashes = fields.members["hashes"] == nil ? nil : try fields.hashes()
    }

    package var json: StrictJSON {
        var object: [String: StrictJSON] = ["version": .number(String(version))]
        if let length { object["length"] = .number(String(length)) }
        if let hashes { object["hashes"] = .object(hashes.mapValues(StrictJSON.string)) }
        return .object(object)
    }
}
