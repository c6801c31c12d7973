import Hummingbird
import NIOCore
@testable import OfflineServe
import Testing

/// `ForwardedRequestBody` and `UploadProgress`: the proxy's watch over who reads a page's
/// request body, which decides whether the server may read the connection on
/// (`OriginProxyTests.earlyAnswer` covers the connection end to end).
@Suite("Forwarded request body")
struct ForwardedRequestBodyTests {
    static func body(_ text: String, _ progress: UploadProgress) -> ForwardedRequestBody {
        ForwardedRequestBody(body: RequestBody(buffer: ByteBuffer(string: text)), progress: progress)
    }

    @Test("an upload read to its end is settled; one under way is not, until it ends")
    func readToTheEnd() async throws {
        let progress = UploadProgress()
        var iterator = Self.body("page body", progress).makeAsyncIterator()
        let chunk = try await iterator.next()
        #expect(chunk.map { String(buffer: $0) } == "page body")
        #expect(await progress.settled(within: .milliseconds(10)) == false, "the body's end not read yet")
        #expect(try await iterator.next() == nil)
        #expect(await progress.settled(within: .zero))
    }

    @Test("a body is uploaded once: a second upload fails instead of reading the stream again")
    func secondUpload() async throws {
        let progress = UploadProgress()
        let body = Self.body("once", progress)
        var first = body.makeAsyncIterator()
        while try await first.next() != nil {}
        var second = body.makeAsyncIterator()
        await #expect(throws: ForwardedRequestBody.AlreadyUploaded.self) { _ = try await second.next() }
    }

    @Test("an upload that had not begun when the answer was written never begins")
    func sealedBeforeStart() async throws {
        let progress = UploadProgress()
        let body = Self.body("late", progress)
        #expect(await progress.settled(within: .zero))
        var late = body.makeAsyncIterator()
        await #expect(throws: ForwardedRequestBody.AlreadyUploaded.self) { _ = try await late.next() }
        #expect(await progress.settled(within: .zero))
    }
}
