import OfflineAgent
import COfflineZlib
import Foundation

/// Builds zip archives byte by byte, including malformed ones no zip tool would write.
package struct ZipBuilder {
    package init() {}

    package struct Entry {
        package var name: [UInt8]
        /// The bytes stored in the archive (already compressed when `method` is 8).
        package var payload: [UInt8]
        package var method: UInt16
        package var flags: UInt16
        package var crc: UInt32
        package var compressedSize: UInt32
        package var uncompressedSize: UInt32
        /// Unix mode in the high 16 bits when `madeBy` says Unix.
        package var externalAttributes: UInt32
        package var madeBy: UInt16
        /// A different name in the local header, to make headers disagree.
        package var localName: [UInt8]?

        package init(
            name: [UInt8], payload: [UInt8], method: UInt16 = 0, flags: UInt16 = 0x0800, crc: UInt32,
            compressedSize: UInt32, uncompressedSize: UInt32, externalAttributes: UInt32 = UInt32(0o100644) << 16,
            madeBy: UInt16 = 0x031E, localName: [UInt8]? = nil
        ) {
            self.name = name
            self.payload = payload
            self.method = method
            self.flags = flags
            self.crc = crc
            self.compressedSize = compressedSize
            self.uncompressedSize = uncompressedSize
            self.externalAttributes = externalAttributes
            self.madeBy = madeBy
            self.localName = localName
        }
    }

    package var entries: [Entry] = []

    /// A regular file, stored or deflated, with truthful headers.
    package mutating func file(_ name: String, _ data: [UInt8], deflate: Bool = false, mode: UInt32 = 0o100644) {
        let payload = deflate ? Self.deflate(data) : data
        entries.append(Entry(
            name: Array(name.utf8), payload: payload, method: deflate ? 8 : 0, crc: Self.crc32(data),
            compressedSize: UInt32(payload.count), uncompressedSize: UInt32(data.count),
            externalAttributes: mode << 16))
    }

    package mutating func file(_ name: String, _ text: String, deflate: Bool = false) {
        file(name, Array(text.utf8), deflate: deflate)
    }

    package mutating func directory(_ name: String) {
        entries.append(Entry(name: Array(name.utf8), payload: [], crc: 0, compressedSize: 0, uncompressedSize: 0,
                             externalAttributes: UInt32(0o040755) << 16 | 0x10))
    }

    package func build() -> [UInt8] {
        var out: [UInt8] = []
        var central: [UInt8] = []
        for entry in entries {
            let offset = UInt32(out.count)
            let localName = entry.localName ?? entry.name
            out += le32(0x0403_4b50) + le16(20) + le16(entry.flags) + le16(entry.method) + le16(0) + le16(0x21)
            out += le32(entry.crc) + le32(entry.compressedSize) + le32(entry.uncompressedSize)
            out += le16(UInt16(localName.count)) + le16(0) + localName + entry.payload
            central += le32(0x0201_4b50) + le16(entry.madeBy) + le16(20) + le16(entry.flags) + le16(entry.method)
            central += le16(0) + le16(0x21) + le32(entry.crc) + le32(entry.compressedSize) + le32(entry.uncompressedSize)
            central += le16(UInt16(entry.name.count)) + le16(0) + le16(0) + le16(0) + le16(0)
            central += le32(entry.externalAttributes) + le32(offset) + entry.name
        }
        let centralOffset = UInt32(out.count)
        out += central
        out += le32(0x0605_4b50) + le16(0) + le16(0) + le16(UInt16(entries.count)) + le16(UInt16(entries.count))
        out += le32(UInt32(central.count)) + le32(centralOffset) + le16(0)
        return out
    }

    package func write(to path: String) throws {
        try Data(build()).write(to: URL(fileURLWithPath: path))
    }

    package static func crc32(_ data: [UInt8]) -> UInt32 {
        UInt32(data.withUnsafeBufferPointer { COfflineZlib.crc32(0, $0.baseAddress, UInt32($0.count)) })
    }

    /// Raw deflate (no zlib header), as zip method 8 stores it.
    package static func deflate(_ data: [UInt8]) -> [UInt8] {
        var stream = z_stream()
        deflateInit2_(&stream, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        defer { deflateEnd(&stream) }
        var input = data
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, UInt(data.count))) + 64)
        let produced = input.withUnsafeMutableBufferPointer { inBuf in
            output.withUnsafeMutableBufferPointer { outBuf in
                stream.next_in = inBuf.baseAddress
                stream.avail_in = UInt32(inBuf.count)
                stream.next_out = outBuf.baseAddress
                stream.avail_out = UInt32(outBuf.count)
                _ = COfflineZlib.deflate(&stream, Z_FINISH)
                return outBuf.count - Int(stream.avail_out)
            }
        }
        return Array(output[0..<produced])
    }

    private func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8)] }
    private func le32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8(v >> 24)] }
}
