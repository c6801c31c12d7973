/// The canonical JSON that TUF signatures cover, byte for byte as securesystemslib's
/// `encode_canonical` (python-tuf's `CanonicalJSONSerializer`) writes it: no
/// whitespace, object keys sorted by Unicode code point, strings with only `\` and
/// `"` escaped (every other character as its UTF-8), integers only.
///
/// Keys are sorted by their scalars, never by Swift's `String` ordering: `String`
/// compares canonically equivalent strings as equal (é and e + U+0301), which would
/// give two readers of one object two byte sequences, and one of them a signature
/// that does not verify.
package enum CanonicalJSON {
    /// Why a value has no canonical form.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package var description: String
    }

    /// The canonical bytes of `value`.
    ///
    /// - Throws: `Failure` for a number that is not an integer (a fraction or an
    ///   exponent: `encode_canonical` refuses floats).
    package static func encode(_ value: StrictJSON) throws(Failure) -> [UInt8] {
        var out: [UInt8] = []
        try write(value, to: &out)
        return out
    }

    private static func write(_ value: StrictJSON, to out: inout [UInt8]) throws(Failure) {
        switch value {
        case .null: out += Array("null".utf8)
        case .bool(let flag): out += Array((flag ? "true" : "false").utf8)
        case .number(let text): out += try integer(text)
        case .string(let text): string(text, to: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                try write(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in sortedKeys(members).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                string(key, to: &out)
                out.append(UInt8(ascii: ":"))
                // The key came from `members`, so the lookup cannot miss.
                try write(members[key] ?? .null, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Keys in code point order, as Python's `sorted` orders `str`.
    package static func sortedKeys(_ members: [String: StrictJSON]) -> [String] {
        members.keys.map { ($0, Array($0.unicodeScalars.map(\.value))) }
            .sorted { $0.1.lexicographicallyPrecedes($1.1) }
            .map(\.0)
    }

    /// A JSON integer as Python's `str(int)` writes it: as read, except `-0` is `0`.
    private static func integer(_ text: String) throws(Failure) -> [UInt8] {
        let bytes = Array(text.utf8)
        guard !bytes.contains(where: { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }) else {
            throw Failure(description: "number \(text.prefix(32)) is not an integer (canonical JSON has integers only)")
        }
        return bytes == Array("-0".utf8) ? [UInt8(ascii: "0")] : bytes
    }

    private static func string(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }
}
