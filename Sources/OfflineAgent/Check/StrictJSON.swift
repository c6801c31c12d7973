/// A strict RFC 8259 JSON reader for signed bodies, where leniency is a hazard:
/// one signed body must mean one thing to every parser.
///
/// Unlike `JSONSerialization`/`JSONDecoder` (which silently keep one of two equal
/// keys), it refuses a key repeated in any object at any depth (compared after
/// unescaping, so `"size"` and `"\u0073ize"` are the same key), and it refuses what
/// parsers disagree on: invalid UTF-8, lone surrogates, raw control characters in
/// strings, leading zeros, a byte-order mark, trailing bytes. Numbers are kept as
/// written so the caller decides which ones are acceptable, without a lossy
/// conversion first. One pass over the bytes; nesting is bounded so hostile depth
/// cannot exhaust the stack.
package enum StrictJSON: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number exactly as written (already checked against the JSON grammar).
    case number(String)
    case string(String)
    case array([StrictJSON])
    /// Keys are unique (a duplicate is refused), so a dictionary loses nothing.
    case object([String: StrictJSON])

    /// Why a body was refused: what and at which byte offset.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        package var offset: Int
        package var message: String
        package var description: String { "\(message) at byte \(offset)" }
    }

    /// Objects and arrays nested deeper than this are refused.
    static let maxDepth = 32

    /// Parses a whole body: exactly one value, optionally surrounded by whitespace.
    package static func parse(_ bytes: some Collection<UInt8>) throws(Failure) -> StrictJSON {
        var reader = Reader(bytes: Array(bytes))
        reader.skipWhitespace()
        let value = try reader.value(depth: 0)
        reader.skipWhitespace()
        guard reader.index == reader.bytes.count else { throw reader.failure("unexpected data after the JSON value") }
        return value
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        func failure(_ message: String) -> Failure { Failure(offset: index, message: message) }

        mutating func skipWhitespace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x0A || bytes[index] == 0x0D {
                index += 1
            }
        }

        mutating func value(depth: Int) throws(Failure) -> StrictJSON {
            guard index < bytes.count else { throw failure("unexpected end of JSON") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw failure("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws(Failure) {
            let count = word.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw failure("invalid literal") }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] {
                throw failure("invalid literal")
            }
            index += count
        }

        mutating func object(depth: Int) throws(Failure) -> StrictJSON {
            guard depth <= StrictJSON.maxDepth else { throw failure("nesting deeper than \(StrictJSON.maxDepth)") }
            index += 1
            var members: [String: StrictJSON] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a string key") }
                let keyOffset = index
                let key = try string()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':'") }
                index += 1
                skipWhitespace()
                let member = try value(depth: depth)
                guard members.updateValue(member, forKey: key) == nil else {
                    throw Failure(offset: keyOffset, message: "duplicated key '\(StrictJSON.printable(key))'")
                }
                skipWhitespace()
                guard index < bytes.count else { throw failure("unexpected end of JSON") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                } else {
                    throw failure("expected ',' or '}'")
                }
            }
        }

        mutating func array(depth: Int) throws(Failure) -> StrictJSON {
            guard depth <= StrictJSON.maxDepth else { throw failure("nesting deeper than \(StrictJSON.maxDepth)") }
            index += 1
            var elements: [StrictJSON] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth))
                skipWhitespace()
                guard index < bytes.count else { throw failure("unexpected end of JSON") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(elements)
                } else {
                    throw failure("expected ',' or ']'")
                }
            }
        }

        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, returned as written.
        mutating func number() throws(Failure) -> String {
            let start = index
            func digits(_ reader: inout Reader) -> Int {
                let first = reader.index
                while reader.index < reader.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(reader.bytes[reader.index]) {
                    reader.index += 1
                }
                return reader.index - first
            }
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
                throw failure("invalid number")
            }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
                if index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                    throw failure("number with a leading zero")
                }
            } else {
                _ = digits(&self)
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw failure("invalid number") }
            }
            if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw failure("invalid number") }
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        /// A string starting at the opening quote; escapes resolved, UTF-8 checked.
        mutating func string() throws(Failure) -> String {
            index += 1
            var out: [UInt8] = []
            while true {
                guard index < bytes.count else { throw failure("unterminated string") }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = String(validating: out, as: UTF8.self) else { throw failure("string is not valid UTF-8") }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw failure("unterminated string") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        let scalar = try unicodeEscape()
                        out.append(contentsOf: Array(String(Character(scalar)).utf8))
                    default:
                        index -= 1
                        throw failure("invalid escape")
                    }
                case 0x00..<0x20:
                    throw failure("control character in a string")
                default:
                    out.append(byte)
                    index += 1
                }
            }
        }

        /// After `\u`: four hex digits, or a surrogate pair written as two escapes.
        mutating func unicodeEscape() throws(Failure) -> Unicode.Scalar {
            let high = try hex4()
            if (0xDC00...0xDFFF).contains(high) { throw failure("lone surrogate in a string") }
            if (0xD800...0xDBFF).contains(high) {
                guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw failure("lone surrogate in a string")
                }
                index += 2
                let low = try hex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw failure("lone surrogate in a string") }
                let value = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                guard let scalar = Unicode.Scalar(value) else { throw failure("invalid escape") }
                return scalar
            }
            guard let scalar = Unicode.Scalar(high) else { throw failure("invalid escape") }
            return scalar
        }

        mutating func hex4() throws(Failure) -> UInt32 {
            guard bytes.count - index >= 4 else { throw failure("invalid \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw failure("invalid \\u escape")
                }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }
    }

    /// A key fit for a one-line message: control characters escaped, at most 64 characters.
    static func printable(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(64) {
            out += scalar.value < 0x20 || scalar.value == 0x7F ? "\\u{\(String(scalar.value, radix: 16))}" : String(scalar)
        }
        return text.unicodeScalars.count > 64 ? out + "…" : out
    }
}
