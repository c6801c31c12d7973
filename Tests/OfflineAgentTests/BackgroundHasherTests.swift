import Crypto
import NIOCore
import Testing
@testable import OfflineAgent
import TestSupport

/// A download's hash is computed on the pool, one batch behind the receive loop: it must
/// be the hash of exactly the bytes given, in their order, whatever their split.
@Suite("Download hashing beside the receive loop")
struct BackgroundHasherTests {
    /// `count` pseudo-random bytes (a fixed seed).
    private static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    @Test("the hash of buffers of every size, across batch boundaries, equals the hash of their bytes", arguments: [
        [0],
        [1, 0, 1],
        [BackgroundHasher.batchBytes - 1, 1, 0, 2],
        [BackgroundHasher.batchBytes, BackgroundHasher.batchBytes],
        [16_384, 65_536, 3 * BackgroundHasher.batchBytes + 7, 1, 100_000, 16_384],
    ])
    func matchesWholeHash(sizes: [Int]) async throws {
        let pool = BlockingPool(threads: 2)
        let all = Self.bytes(sizes.reduce(0, +), seed: UInt64(sizes.count))
        var hasher = BackgroundHasher(seed: SHA256(), pool: pool)
        var start = 0
        for size in sizes {
            try await hasher.update(ByteBuffer(bytes: all[start..<start + size]))
            start += size
        }
        let digest = try await hasher.finalize()
        await pool.shutdown()
        #expect(digest == SHA256.hash(data: all).hex)
    }

    @Test("a seed (a resumed download's kept prefix) is continued, not restarted")
    func continuesSeed() async throws {
        let pool = BlockingPool(threads: 1)
        let prefix = Self.bytes(1000, seed: 1), rest = Self.bytes(2 * BackgroundHasher.batchBytes + 5, seed: 2)
        var seed = SHA256()
        seed.update(data: prefix)
        var hasher = BackgroundHasher(seed: seed, pool: pool)
        try await hasher.update(ByteBuffer(bytes: rest))
        let digest = try await hasher.finalize()
        await pool.shutdown()
        #expect(digest == SHA256.hash(data: prefix + rest).hex)
    }

    @Test("a pool that is shut down fails the hash with one clear error, not a wrong digest")
    func shutDownPoolFails() async throws {
        let pool = BlockingPool(threads: 1)
        await pool.shutdown()
        let error = await #expect(throws: OfflineAgentError.self) {
            var hasher = BackgroundHasher(seed: SHA256(), pool: pool)
            try await hasher.update(ByteBuffer(bytes: Self.bytes(BackgroundHasher.batchBytes, seed: 3)))
            _ = try await hasher.finalize()
        }
        #expect(error?.cause == .cancelled)
    }
}
