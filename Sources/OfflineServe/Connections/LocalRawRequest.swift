/// A request read from the connection's raw bytes by `LocalRawResponder`, in a
/// grammar stricter than the HTTP decoder's (RFC 9112 without any of its leniencies), so
/// every request it frames is one the decoder frames the same way: one of a few methods,
/// HTTP/1.1, no field that changes the protocol (`Upgrade`) or frames the body by chunks
/// (`Transfer-Encoding`), a head ending at its first empty line, then as many bytes of
/// body as one `Content-Length` in plain digits says, all of them already read.
struct LocalRawRequest: Equatable {
    /// The methods framed here: those a page sends with or without a body.
    enum Method: String, CaseIterable {
        case get = "GET", head = "HEAD", post = "POST", put = "PUT", delete = "DELETE", options = "OPTIONS", patch = "PATCH"
    }

    /// The head's bytes and the body's after them: the whole request.
    let length: Int
    /// The head's bytes, up to and with its empty line.
    let headLength: Int
    let method: Method
    /// Where the target is (origin form: the path and the query, if any).
    let target: Range<Int>
    /// Where the target's path is (up to its `?`, if any).
    let path: Range<Int>
    /// Where the value of the one `Host` line is; nil with none, more than one, or one with
    /// whitespace after its value.
    let host: Range<Int>?
    /// No field asks for more than the whole file with the response's usual fields: no
    /// body, no `Range`, `If-Range`, `If-None-Match`, `If-Modified-Since` or `Expect`, and
    /// no `Connection` but `keep-alive`.
    let plain: Bool
    /// Every `Connection` line says `keep-alive` and nothing else (or there is none): the
    /// connection goes on after the response and no other field is hop-by-hop.
    let keepsAlive: Bool
    /// The request has a `Content-Length` (maybe `0`).
    let hasLength: Bool

    /// A `GET` (the only method a whole file is answered to before decoding).
    var isGet: Bool { method == .get }

    /// The body's bytes, after the head.
    var body: Range<Int> { headLength..<length }

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
        /// Body bytes: a longer body is left to the decoder.
        var body = 64 * 1024
    }

    /// Reads the head at the start of `bytes`.
    static func parse(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) -> Parse {
        var reader = Reader(bytes: bytes, end: min(bytes.count, limits.bytes))
        do {
            return .request(try reader.request(limits: limits, available: bytes.count))
        } catch .incomplete {
            // Within the limits only while the bytes to come may still end the head there.
            return bytes.count < limits.bytes ? .incomplete : .other
        } catch {
            return .other
        }
    }

    /// Calls `body` with each field line of this request's head (at the start of `bytes`),
    /// in order: its name and its value without the whitespace around it.
    func forEachField(in bytes: UnsafeRawBufferPointer, _ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void) {
        // The grammar was checked: lines end in CRLF, a name ends at its colon.
        var index = target.upperBound + " HTTP/1.1\r\n".utf8.count
        while bytes[index] != Reader.cr {
            let nameStart = index
            while bytes[index] != UInt8(ascii: ":") { index += 1 }
            let name = nameStart..<index
            index += 1
            while bytes[index] == Reader.space || bytes[index] == Reader.tab { index += 1 }
            let valueStart = index
            while bytes[index] != Reader.cr { index += 1 }
            var valueEnd = index
            while valueEnd > valueStart, bytes[valueEnd - 1] == Reader.space || bytes[valueEnd - 1] == Reader.tab { valueEnd -= 1 }
            body(UnsafeRawBufferPointer(rebasing: bytes[name]), UnsafeRawBufferPointer(rebasing: bytes[valueStart..<valueEnd]))
            index += 2
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

        /// The head, then its body when all of it is in the `available` bytes.
        mutating func request(limits: Limits, available: Int) throws(Stop) -> LocalRawRequest {
            let method = try method()
            let (target, path) = try target()
            try literal(" HTTP/1.1\r\n")
            var host: Range<Int>?, hosts = 0, plain = true, keepsAlive = true, fields = 0
            var bodyLength: Int?
            while true {
                guard index + 1 < end else { throw .incomplete }
                if bytes[index] == Self.cr {
                    guard bytes[index + 1] == Self.lf else { throw .other }
                    let headLength = index + 2
                    let length = headLength + (bodyLength ?? 0)
                    // The head is complete: only the body may still be on its way.
                    guard length <= available else { throw .incomplete }
                    return LocalRawRequest(
                        length: length, headLength: headLength, method: method, target: target, path: path,
                        host: hosts == 1 ? host : nil, plain: plain && bodyLength == nil, keepsAlive: keepsAlive,
                        hasLength: bodyLength != nil)
                }
                fields += 1
                guard fields <= limits.fields else { throw .other }
                let (name, value, padded) = try field()
                switch Self.kind(of: name, in: bytes) {
                case .framing:
                    throw .other
                case .length:
                    // One length, in digits without a leading zero nor whitespace after them
                    // (which the decoder refuses), within the limit.
                    guard bodyLength == nil, !padded, let count = Self.digits(value, in: bytes), count <= limits.body else { throw .other }
                    bodyLength = count
                case .host:
                    // The decoder keeps whitespace after a value: such a value names no host here.
                    hosts += padded ? 2 : 1
                    host = value
                case .selecting:
                    plain = false
                case .connection:
                    if !UnsafeRawBufferPointer(rebasing: bytes[value]).equalsIgnoringASCIICase("keep-alive") {
                        plain = false
                        keepsAlive = false
                    }
                case .other:
                    break
                }
            }
        }

        /// The method and the space after it.
        mutating func method() throws(Stop) -> Method {
            let start = index
            while true {
                guard index < end else { throw .incomplete }
                let byte = bytes[index]
                if byte == Self.space { break }
                guard byte >= UInt8(ascii: "A"), byte <= UInt8(ascii: "Z"), index - start < 7 else { throw .other }
                index += 1
            }
            let name = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            guard let method = Method.allCases.first(where: { $0.rawValue.utf8.elementsEqual(name) }) else { throw .other }
            index += 1
            return method
        }

        /// The value of a `Content-Length` in `range`: 1 to 9 digits, no leading zero but `0` itself.
        static func digits(_ range: Range<Int>, in bytes: UnsafeRawBufferPointer) -> Int? {
            guard (1...9).contains(range.count), range.count == 1 || bytes[range.lowerBound] != UInt8(ascii: "0") else { return nil }
            var value = 0
            for index in range {
                let byte = bytes[index]
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
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
        /// version: its range and its path's.
        mutating func target() throws(Stop) -> (target: Range<Int>, path: Range<Int>) {
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
            return (start..<index, start..<(pathEnd ?? index))
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
            /// Frames the body by chunks, or changes the protocol.
            case framing
            /// `Content-Length`.
            case length
            case host
            /// Read by `reply` (or `Expect`): not a plain whole-file request.
            case selecting
            case connection
            case other
        }

        static let kinds = FieldNameTable<FieldKind>([
            ("host", .host), ("content-length", .length), ("transfer-encoding", .framing), ("upgrade", .framing),
            ("connection", .connection), ("range", .selecting), ("if-range", .selecting), ("if-none-match", .selecting),
            ("if-modified-since", .selecting), ("expect", .selecting),
        ])

        static func kind(of name: Range<Int>, in bytes: UnsafeRawBufferPointer) -> FieldKind {
            kinds.kind(of: UnsafeRawBufferPointer(rebasing: bytes[name])) ?? .other
        }
    }
}
