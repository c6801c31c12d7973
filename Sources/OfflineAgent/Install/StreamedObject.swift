/// What a streamed patch's splitter saw at one local header: the object that holds the
/// entry's bytes and the CRC-32 and size the header gave them. The tree builder links
/// the object to a central directory entry only when libzip's entry at that offset
/// has the same CRC-32 and size (`ZipExtractor.makeTree(view:…)`).
struct StreamedObject: Sendable, Equatable {
    /// The plain object name (`<sha256>`).
    var name: String
    var crc32: UInt32
    var size: Int64
}
