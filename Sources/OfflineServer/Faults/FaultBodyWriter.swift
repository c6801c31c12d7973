import Hummingbird
import NIOCore
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// Writes a response body through a `FaultBodyPlan`: inverts the byte at `corruptAt`,
/// pauses at `stall`, and at `cut` stops and fails, so the server closes (or, with
/// `reset`, resets) the connection short of the `Content-Length` already sent.
struct FaultBodyWriter: ResponseBodyWriter {
    var base: any ResponseBodyWriter
    let plan: FaultBodyPlan
    let channel: any Channel
    /// Body bytes passed on so far.
    private var offset = 0
    private var stalled = false

    init(base: any ResponseBodyWriter, plan: FaultBodyPlan, channel: any Channel) {
        self.base = base
        self.plan = plan
        self.channel = channel
    }

    mutating func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        let end = offset + buffer.readableBytes
        if let at = plan.corruptAt, at >= offset, at < end {
            let index = buffer.readerIndex + (at - offset)
            buffer.setInteger(buffer.getInteger(at: index, as: UInt8.self)! ^ 0xFF, at: index)
        }
        if let stall = plan.stall, !stalled, stall.at < end {
            stalled = true
            let head = buffer.readSlice(length: stall.at - offset)!
            try await pass(head)
            try await Task.sleep(for: stall.duration)
        }
        try await pass(buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await base.finish(trailingHeaders)
    }

    private mutating func pass(_ buffer: ByteBuffer) async throws {
        guard buffer.readableBytes > 0 || plan.cut == offset else { return }
        guard let cut = plan.cut, offset + buffer.readableBytes >= cut else {
            offset += buffer.readableBytes
            try await base.write(buffer)
            return
        }
        if cut > offset { try await base.write(buffer.getSlice(at: buffer.readerIndex, length: cut - offset)!) }
        offset = cut
        if plan.reset {
            // Linger 0 and close here: the close sends RST at once and drops whatever is unsent
            // (Hummingbird's own close on the error below would half-close with a FIN first).
            try await (channel as? any SocketOptionProvider)?.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            try? await channel.close()
        } else {
            // Let the bytes already written leave before the orderly close, which drops pending writes.
            try await Task.sleep(for: .milliseconds(50))
        }
        throw ServerError(.fault, "fault injected: connection \(plan.reset ? "reset" : "closed") after \(cut) bytes of body",
                                cause: .network)
    }
}
