/// Snapshot metadata: the version of every targets role (`targets.json`, and
/// `ROLE.json` for delegated roles).
package struct TUFSnapshot: Sendable {
    package let metadata: TUFMetadata
    package let meta: [String: TUFMetaFile]

    package init(_ bytes: some Collection<UInt8>) throws {
        metadata = try TUFMetadata(bytes, type: "snapshot")
        var meta: [String: TUFMetaFile] = [:]
        for (name, value) in try metadata.signed.object("meta") {
            meta[name] = try TUFMetaFile(TUFFields(value, context: "snapshot.meta.\(StrictJSON.printable(name))"))
        }
        guard meta["targets.json"] != nil else { throw TUFKey.invalid("snapshot.signed.meta does not name targets.json") }
        self.meta = meta
    }
}
