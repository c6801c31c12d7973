import Foundation

/// Runs blocking file work (a lock's wait, fsyncs, renames) on a thread of its own, not
/// on one of the cooperative threads the server's requests run on.
enum OwnThread {
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }
}
