/// The package's one hex encoder: digests on the wire, key fingerprints, file names of
/// downloads, published files. `String(format: "%02x")` would pull in Foundation.
extension Sequence where Element == UInt8 {
    /// The bytes as lowercase hex digits, two per byte.
    package var hex: String {
        var digits: [UInt8] = []
        digits.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            digits.append(Self.hexDigit(byte >> 4))
            digits.append(Self.hexDigit(byte & 0x0F))
        }
        return String(decoding: digits, as: UTF8.self)
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
