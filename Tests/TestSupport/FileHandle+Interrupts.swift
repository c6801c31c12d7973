import Foundation
#if canImport(Glibc)
import Glibc
#endif

// swift-corelibs-foundation's `readDataToEndOfFile()`, `readData(ofLength:)` and
// `availableData` wrap their read in `try!`, so a read interrupted by a signal (EINTR,
// e.g. SIGCHLD while the tests run a hundred child processes) traps the whole test
// process. The tests read pipes through these instead, which retry an interrupted read.
extension FileHandle {
    /// Every byte until end of file.
    package func readAllRetryingInterrupts() -> Data {
        var data = Data()
        while case let chunk = readSomeRetryingInterrupts(), !chunk.isEmpty { data.append(chunk) }
        return data
    }

    /// Up to `limit` bytes, blocking until at least one is there; empty at end of file
    /// (or on an error other than EINTR).
    package func readSomeRetryingInterrupts(limit: Int = 64 * 1024) -> Data {
        var buffer = [UInt8](repeating: 0, count: max(1, limit))
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fileDescriptor, $0.baseAddress, $0.count) }
            if count >= 0 { return Data(buffer[0..<count]) }
            if errno != EINTR { return Data() }
        }
    }
}
