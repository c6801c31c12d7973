import Foundation
import OfflineAgent

extension StrictJSON {
    /// The value as JSON text, two-space indented, object keys in code point order,
    /// newline-terminated: how metadata files are written. Control characters are
    /// escaped (`\n`, `\u0000`), so the file is valid JSON whatever a string holds; the
    /// signatures cover the canonical form, never these bytes.
    package func written() -> Data {
        var out: [UInt8] = []
        write(to: &out, indent: 0)
        out.append(0x0A)
        return Data(out)
    }

    private func write(to out: inout [UInt8], indent: Int) {
        func newline(_ level: Int) {
            out.append(0x0A)
            out += [UInt8](repeating: 0x20, count: 2 * level)
        }
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let flag): out += Array((flag ? "true" : "false").utf8)
        case .number(let text): out += Array(text.utf8)
        case .string(let text): Self.writeString(text, to: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                element.write(to: &out, indent: indent + 1)
            }
            if !elements.isEmpty { newline(indent) }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in CanonicalJSON.sortedKeys(members).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                Self.writeString(key, to: &out)
                out += Array(": ".utf8)
                (members[key] ?? .null).write(to: &out, indent: indent + 1)
            }
            if !members.isEmpty { newline(indent) }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), byte]
            case 0x0A: out += Array("\\n".utf8)
            case 0x00..<0x20: out += Array(String(format: "\\u%04x", Int(byte)).utf8)
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
