import Hummingbird
import NIOCore
import Synchronization

/// The page's request body as the proxy uploads it to the origin, watched.
///
/// HummingbirdCore reads the connection's next request from the same stream the body
/// comes from, as soon as the response is written. When the upload is still reading that
/// stream then (the origin answered before taking the whole body, or failed in the middle
/// of it), the two readers would meet on one stream, which NIO treats as a programming
/// error and traps. So once its response is written the proxy waits briefly for the
/// upload to settle, and closes the connection instead of letting the server read on
/// when it does not.
struct ForwardedRequestBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// A second upload of one body (a retry on another connection) finds its bytes gone.
    struct AlreadyUploaded: Error {}

    let body: RequestBody
    let progress: UploadProgress

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: RequestBody.AsyncIterator?
        let progress: UploadProgress

        mutating func next() async throws -> ByteBuffer? {
            guard base != nil else { throw AlreadyUploaded() }
            do {
                let chunk = try await base!.next()
                if chunk == nil { progress.finish() }
                return chunk
            } catch {
                // The stream itself failed: the connection is gone, nothing reads it any more.
                progress.finish()
                throw error
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: progress.start() ? body.makeAsyncIterator() : nil, progress: progress)
    }
}

/// Whether an upload began and whether it reached the end of the request body.
final class UploadProgress: Sendable {
    private let state = Mutex((started: false, finished: false))

    /// Marks the upload begun; false when it already had (the body can be read once).
    func start() -> Bool {
        state.withLock { state in
            defer { state.started = true }
            return !state.started
        }
    }

    func finish() { state.withLock { $0.finished = true } }

    /// An upload began and has not read the body to its end: something may still be
    /// reading the connection's request stream.
    var isUnfinished: Bool { state.withLock { $0.started && !$0.finished } }

    /// Whether the upload has read the body to its end (or never began), given up to
    /// `limit` to get there: an origin may answer before the uploader has read the body's
    /// end from the stream, though every byte was sent. Checked with a doubling pause
    /// from 100 µs, so the usual case costs one or two checks.
    func settled(within limit: Duration = .seconds(1)) async -> Bool {
        var pause = Duration.microseconds(100), waited = Duration.zero
        while isUnfinished {
            guard waited < limit else { return false }
            try? await Task.sleep(for: pause)
            waited += pause
            pause = min(pause * 2, .milliseconds(100))
        }
        return true
    }
}
