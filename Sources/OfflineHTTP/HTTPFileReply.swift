import Hummingbird
import OfflineAgent

/// The answer to a `GET` or `HEAD` of a file, decided from the request's conditional and
/// range fields and the file's validators (RFC 9110 §13.2.2, §14): the one decision
/// between `304`, `416`, `206` and `200` of both servers (`serve`'s package files,
/// `offline-server`'s published files). Each server adds its own headers (type, cache
/// policy, validators) and sends the bytes its own way.
package struct HTTPFileReply: Equatable, Sendable {
    package var status: HTTPResponse.Status
    /// What the answer adds to the file's headers: `Content-Length` (but for a `304`),
    /// `Content-Range` (`206`, `416`), and the `416`'s `Content-Type`.
    package var fields: HTTPFields
    /// The file's bytes the answer carries; nil for none (`304`, `416`, an empty file).
    package var bytes: ClosedRange<Int64>?
    /// The body of a `416`, which says why in a line; nil for any other answer.
    package var text: String?

    /// The answer for a request with `fields` to a file of `size` bytes whose validators
    /// are `etag`, `lastModified` (an IMF-fixdate) and `modifiedSeconds` (the same time,
    /// for `If-Modified-Since`).
    ///
    /// `If-None-Match` wins over `If-Modified-Since`; a `Range` the server ignores (several
    /// ranges, another unit, bad syntax) or whose `If-Range` fails gets the whole file.
    package init(_ fields: HTTPFields, size: Int64, etag: String, lastModified: String, modifiedSeconds: Int) {
        if Self.isNotModified(fields, etag: etag, modifiedSeconds: modifiedSeconds) {
            self.init(status: .notModified, fields: [:], bytes: nil, text: nil)
            return
        }
        var range = HTTPRange(header: fields[.range], size: size)
        if range != .full, !HTTPValidators.ifRangeHolds(fields[.ifRange], etag: etag, lastModified: lastModified) {
            range = .full
        }
        switch range {
        case .unsatisfiable:
            let text = "range not satisfiable\n"
            self.init(
                status: .rangeNotSatisfiable,
                fields: [
                    .contentRange: "bytes */\(size)", .contentType: "text/plain; charset=utf-8",
                    .contentLength: String(text.utf8.count),
                ],
                bytes: nil, text: text)
        case .partial(let bytes):
            self.init(
                status: .partialContent,
                fields: [.contentRange: "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(size)", .contentLength: String(bytes.count)],
                bytes: bytes, text: nil)
        case .full:
            self.init(status: .ok, fields: [.contentLength: String(size)], bytes: size > 0 ? 0...(size - 1) : nil, text: nil)
        }
    }

    private init(status: HTTPResponse.Status, fields: HTTPFields, bytes: ClosedRange<Int64>?, text: String?) {
        self.status = status
        self.fields = fields
        self.bytes = bytes
        self.text = text
    }

    /// `headers` with the answer's fields set over them.
    package func headers(over headers: HTTPFields) -> HTTPFields {
        var headers = headers
        for field in fields { headers[field.name] = field.value }
        return headers
    }

    /// Conditional GET (RFC 9110 §13.2.2): `If-None-Match` when present, else
    /// `If-Modified-Since` (a date the file is not newer than).
    private static func isNotModified(_ fields: HTTPFields, etag: String, modifiedSeconds: Int) -> Bool {
        if let noneMatch = fields[.ifNoneMatch] {
            return HTTPValidators.noneMatchHits(noneMatch, etag: etag)
        }
        if let since = fields[.ifModifiedSince], let sinceSeconds = HTTPDate.parse(since) {
            return modifiedSeconds <= sinceSeconds
        }
        return false
    }
}
