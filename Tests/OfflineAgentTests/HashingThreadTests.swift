import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The SHA-256 of a stream hashed on a thread of its own: the digest of the bytes whatever
/// the pieces they arrive in, and a stream abandoned midway ends its thread.
@Suite("Hashing thread")
struct HashingThreadTests {
    @Test("the digest of the whole stream, for lengths around the batch size and pieces of any size",
          arguments: [0, 1, HashingThread.batchBytes - 1, HashingThread.batchBytes, HashingThread.batchBytes + 1,
                      HashingThread.batches * HashingThread.batchBytes + 17, 5_000_000])
    func digest(length: Int) {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        for pieces in [1, 7, 65_536, 1 << 20] {
            let hasher = HashingThread()
            var offset = 0, round = 0
            while offset < length {
                // Uneven pieces up to `pieces` bytes, empty ones too.
                let count = min(length - offset, (round * 7_919) % (pieces + 1))
                bytes.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) }
                offset += count
                round += 1
            }
            #expect(hasher.finalize() == SHA256.hash(data: bytes).hex, "\(length) bytes in pieces of up to \(pieces)")
        }
    }

    @Test("a stream abandoned before its end (a failed patch) stops its thread when it is dropped")
    func abandoned() {
        var ids: [pid_t] = []
        for _ in 0..<20 {
            let hasher = HashingThread()
            // More than the batches hold: the producer waited for the thread, which has run.
            let bytes = [UInt8](repeating: 7, count: HashingThread.batches * HashingThread.batchBytes + 3)
            bytes.withUnsafeBytes { hasher.update($0) }
            ids.append(hasher.threadID)
        }

        #expect(ids.allSatisfy { $0 > 0 })
        let alive = ids.filter { FileManager.default.fileExists(atPath: "/proc/self/task/\($0)") }
        #expect(alive.isEmpty, "hashing threads still running: \(alive)")
    }
}
