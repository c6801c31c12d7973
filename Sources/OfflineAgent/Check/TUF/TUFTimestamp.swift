/// Timestamp metadata: the snapshot version (and optionally its length and hashes).
package struct TUFTimestamp: Sendable {
    package let metadata: TUFMetadata
    package let snapshot: TUFMetaFile

    package init(_ bytes: some Collection<UInt8>) throws {
        metadata = try TUFMetadata(bytes, type: "timestamp")
        let meta = try metadata.signed.object("meta")
        guard meta.count == 1, let entry = meta["snapshot.json"] else {
            throw TUFKey.invalid("timestamp.signed.meta must hold snapshot.json alone")
        }
        snapshot = try TUFMetaFile(TUFFields(entry, context: "timestamp.meta.snapshot.json"))
    }
}
