import Crypto
import NIOCore

/// The SHA-256 of a download's bytes, computed on the blocking pool beside the loop that
/// receives and writes them: one batch is hashed while the next is received. Hashing
/// inline made the receive loop slower than `curl` by the hash's own time (about 40 ms of
/// a 61 MB package at 1.5 GB/s), on a core the download leaves idle.
///
/// Holds at most two batches of the body's buffers (the one being hashed and the one being
/// filled, `batchBytes` each), so memory stays bounded whatever the download's size. Each
/// piece of pool work only hashes: none waits for another (`BlockingPool`'s rule).
/// Used by one task at a time (the receive loop), so not `Sendable`.
struct BackgroundHasher: ~Copyable {
    /// Bytes gathered before a batch goes to the pool: large enough that a pool hop per
    /// batch costs nothing next to hashing it, small enough to bound memory.
    static let batchBytes = 1 << 20

    private let pool: BlockingPool
    /// The state before the batch in flight (or of everything, when none is).
    private var settled: SHA256
    private var inFlight: Task<SHA256, any Error>?
    private var batch: [ByteBuffer] = []
    private var gathered = 0

    /// Starts from `seed`: the hash of a resumed download's kept prefix.
    init(seed: SHA256, pool: BlockingPool) {
        settled = seed
        self.pool = pool
    }

    /// Adds `bytes` (kept by reference, not copied); sends a full batch to the pool, after
    /// the previous batch's hash is done.
    mutating func update(_ bytes: ByteBuffer) async throws {
        guard bytes.readableBytes > 0 else { return }
        batch.append(bytes)
        gathered += bytes.readableBytes
        if gathered >= Self.batchBytes { try await send() }
    }

    /// The hash of every byte added, once the last batch is hashed.
    consuming func finalize() async throws -> String {
        try await send()
        if let inFlight { settled = try await inFlight.value }
        return settled.finalize().hex
    }

    private mutating func send() async throws {
        if let inFlight {
            settled = try await inFlight.value
            self.inFlight = nil
        }
        guard !batch.isEmpty else { return }
        let (start, buffers) = (settled, batch)
        batch = []
        gathered = 0
        let pool = self.pool
        inFlight = Task {
            try await pool.run(.download) {
                var hasher = start
                for buffer in buffers {
                    buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                }
                return hasher
            }
        }
    }
}
