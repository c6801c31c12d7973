/// A request head read from the connection's raw bytes by `LocalWholeFileResponder`, in a
/// grammar stricter than the HTTP decoder's (RFC 9112 without any of its leniencies), so
/// every head it frames is one the decoder frames the same way: a `GET` or `HEAD` of
/// HTTP/1.1, fields without a body (`Content-Length`, `Transfer-Encoding`) or a change of
/// protocol (`Upgrade`), ending at its first empty line.
struct LocalRawRequest: Equatable {
    /// The head's bytes, up to and with its empty line: the whole request.
    let length: Int
    /// A `GET` (else a `HEAD`).
    let isGet: Bool
    /// Where the target's path is (up to its `?`, if any).
    let path: Range<Int>
    /// Where the value of the one `Host` line is; nil with none, more than one, or one with
    /// whitespace after its value.
    let host: Range<Int>?
    /// No field asks for more than the whole file with the response's usual fields: no
    /// `Range`, `If-Range`, `If-None-Match`, `If-Modified-Since` or `Expect`, and no
    /// `Connection` but `keep-alive`.
    let plain: Bool

    /// What the bytes at the start of a buffer are.
    enum Parse: Equatable {
        /// A head in the grammar above, maybe with more bytes after it.
        case request(LocalRawRequest)
        /// The start of such a head: no empty line yet, within the limits.
        case incomplete
        /// Anything else: another method or version, a byte the grammar refuses, a field
        /// that may give a body or change the protocol, or a head past the limits.
        case other
    }

    /// How large a head may be before it is `other`.
    struct Limits: Equatable {
        /// Bytes, empty line included.
        var bytes = 16 * 1024
        /// Field lines.
        var fields = 100
    }

    /// Reads the head at the start of `bytes`.
    static func parse(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) -> Parse {
        var reader = Reader(bytes: bytes, end: min(bytes.count, limits.bytes))
        do {
            return .request(try reader.head(fieldLimit: limits.fields))
        } catch .incomplete {
            // Within the limits only while the bytes to come may still end the head there.
            return bytes.count < limits.bytes ? .incomplete : .other
        } catch {
            return .other
        }
    }

    /// Why a head was not read.
    private enum Stop: Error {
        /// The bytes end inside it.
        case incomplete
        case other
    }

    /// One pass over the bytes.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        let end: Int
        var index = 0

        static let cr: UInt8 = 13, lf: UInt8 = 10, space: UInt8 = 32, tab: UInt8 = 9

        mutating func head(fieldLimit: Int) throws(Stop) -> LocalRawRequest {
            let isGet = try method()
            let path = try target()
            try literal(" HTTP/1.1\r\n")
            var host: Range<Int>?, hosts = 0, plain = true, fields = 0
            while true {
                guard index + 1 < end else { throw .incomplete }
                if bytes[index] == Self.cr {
                    guard bytes[index + 1] == Self.lf else { throw .other }
                    return LocalRawRequest(length: index + 2, isGet: isGet, path: path, host: hosts == 1 ? host : nil, plain: plain)
                }
                fields += 1
                guard fields <= fieldLimit else { throw .other }
                let (name, value, padded) = try field()
                switch Self.kind(of: name, in: bytes) {
                case .framing:
                    throw .other
                case .host:
                    // The decoder keeps whitespace after a value: such a value names no host here.
                    hosts += padded ? 2 : 1
                    host = value
                case .selecting:
                    plain = false
                case .connection:
                    if !Self.equalsIgnoringCase(value, "keep-alive", in: bytes) { plain = false }
                case .other:
                    break
                }
            }
        }

        /// `GET ` (true) or `HEAD ` (false).
        mutating func method() throws(Stop) -> Bool {
            do {
                try literal("GET ")
                return true
            } catch .other {
                try literal("HEAD ")
                return false
            }
        }

        /// `text` at `index`, then past it.
        mutating func literal(_ text: StaticString) throws(Stop) {
            let count = text.utf8CodeUnitCount
            for offset in 0..<count {
                guard index + offset < end else { throw .incomplete }
                guard bytes[index + offset] == text.utf8Start[offset] else { throw .other }
            }
            index += count
        }

        /// An origin-form target of visible ASCII without `#`, up to the space before the
        /// version: the range of its path.
        mutating func target() throws(Stop) -> Range<Int> {
            let start = index
            var pathEnd: Int?
            while true {
                guard index < end else { throw .incomplete }
                let byte = bytes[index]
                if byte == Self.space { break }
                guard byte > Self.space, byte < 0x7F, byte != UInt8(ascii: "#") else { throw .other }
                if byte == UInt8(ascii: "?"), pathEnd == nil { pathEnd = index }
                index += 1
            }
            guard index > start, bytes[start] == UInt8(ascii: "/") else { throw .other }
            return start..<(pathEnd ?? index)
        }

        /// `name ":" OWS value OWS CRLF`, the name a token and the value visible ASCII,
        /// spaces and tabs: the ranges of both (the value without its surrounding
        /// whitespace), and whether whitespace followed the value.
        mutating func field() throws(Stop) -> (name: Range<Int>, value: Range<Int>, padded: Bool) {
            let nameStart = index
            while true {
                guard index < end else { throw .incomplete }
                guard Self.isTokenByte(bytes[index]) else { break }
                index += 1
            }
            guard index > nameStart, bytes[index] == UInt8(ascii: ":") else { throw .other }
            let name = nameStart..<index
            index += 1
            var valueStart: Int?
            var valueEnd = index
            while true {
                guard index < end else { throw .incomplete }
                let byte = bytes[index]
                if byte == Self.cr { break }
                guard byte == Self.tab || (byte >= Self.space && byte < 0x7F) else { throw .other }
                index += 1
                if byte != Self.space && byte != Self.tab {
                    if valueStart == nil { valueStart = index - 1 }
                    valueEnd = index
                }
            }
            guard index + 1 < end else { throw .incomplete }
            guard bytes[index + 1] == Self.lf else { throw .other }
            let padded = index > valueEnd
            index += 2
            return (name, (valueStart ?? valueEnd)..<valueEnd, padded)
        }

        /// RFC 9110 §5.6.2 `tchar`.
        static func isTokenByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
                 UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
                 UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
                return true
            default:
                return false
            }
        }

        enum FieldKind {
            /// May give the request a body, or change the protocol.
            case framing
            case host
            /// Read by `reply` (or `Expect`): not a plain whole-file request.
            case selecting
            case connection
            case other
        }

        static let kinds: [(name: StaticString, kind: FieldKind)] = [
            ("host", .host), ("content-length", .framing), ("transfer-encoding", .framing), ("upgrade", .framing),
            ("connection", .connection), ("range", .selecting), ("if-range", .selecting), ("if-none-match", .selecting),
            ("if-modified-since", .selecting), ("expect", .selecting),
        ]

        static func kind(of name: Range<Int>, in bytes: UnsafeRawBufferPointer) -> FieldKind {
            for known in kinds where equalsIgnoringCase(name, known.name, in: bytes) { return known.kind }
            return .other
        }

        /// Whether the bytes in `range` are `lowercase` in any case.
        static func equalsIgnoringCase(_ range: Range<Int>, _ lowercase: StaticString, in bytes: UnsafeRawBufferPointer) -> Bool {
            guard range.count == lowercase.utf8CodeUnitCount else { return false }
            let expected = lowercase.utf8Start
            for (offset, index) in range.enumerated() {
                let byte = bytes[index]
                guard byte == expected[offset] || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") && byte | 0x20 == expected[offset])
                else { return false }
            }
            return true
        }
    }
}
