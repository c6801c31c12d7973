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
            guard var iterator = base else { throw AlreadyUploaded() }
            defer { base = iterator }
            do {
                let chunk = try await iterator.next()
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
    private let state = Mutex((started: false, finished: false, sealed: false))

    /// Marks the upload begun; false when it already had (the body can be read once) or
    /// when the response was already written without it (`settled`), so the stream is the
    /// server's again.
    func start() -> Bool {
        state.withLock { state in
            defer { state.started = true }
            return !state.started && !state.sealed
        }
    }

    func finish() { state.withLock { $0.finished = true } }

    /// Whether nothing reads the connection's request stream for the upload any more,
    /// given up to `limit` to get there, and from now on nothing will: an upload that has
    /// not begun never will (the origin answered before the uploader started), and one
    /// under way may still read the body's end, though every byte was sent. Checked with
    /// a doubling pause from 100 µs, so the usual case costs one or two checks.
    func settled(within limit: Duration = .seconds(1)) async -> Bool {
        var pause = Duration.microseconds(100), waited = Duration.zero
        while true {
            let quiet = state.withLock { state in
                if !state.started { state.sealed = true }
                return state.sealed || state.finished
            }
            if quiet { return true }
            guard waited < limit else { return false }
            try? await Task.sleep(for: pause)
            waited += pause
            pause = min(pause * 2, .milliseconds(100))
        }
    }
}
