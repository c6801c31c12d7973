/// Events read from the head of a queue, to be sent as one request.
package struct ReportBatch: Sendable {
    /// The queue's absolute position of the segment's first byte when read.
    package var base: Int
    /// The segment read.
    package var segment: Int
    /// Where the batch ends, as an absolute position: acknowledging moves the queue's start here.
    package var end: Int
    /// The events, one JSON object each.
    package var lines: [[UInt8]]

    /// `{"events":[…]}`.
    package var body: [UInt8] {
        var body = Array(#"{"events":["#.utf8)
        for (index, line) in lines.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body += line
        }
        body += Array("]}".utf8)
        return body
    }
}
