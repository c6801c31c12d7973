import NIOCore
import NIOHTTP1

/// The page connection an `OriginExchange` answers on.
///
/// `LocalImmediateResponder` hands the answer to the page pipeline's HTTP/1 encoder (a
/// request the HTTP decoder read); `LocalRawResponder` encodes it itself, as that encoder
/// would (a request framed from the raw bytes, which neither the decoder nor the encoder saw).
protocol OriginExchangePage: AnyObject {
    /// The page connection's event loop, which the origin connection shares.
    var eventLoop: any EventLoop { get }
    /// The page connection takes writes now; while it does not, the origin is not read.
    var isWritable: Bool { get }
    /// Writes the answer's head: `status`, then each field `fields` gives, in order.
    func writeAnswerHead(_ status: HTTPResponseStatus, fields: (_ each: (_ name: String, _ value: String) -> Void) -> Void)
    func writeAnswerBody(_ bytes: ByteBuffer)
    /// Ends the answer, and sends what was written.
    func writeAnswerEnd()
    /// Sends what was written.
    func flushAnswer()
}
