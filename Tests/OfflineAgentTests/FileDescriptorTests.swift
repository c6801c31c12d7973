import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
#if canImport(Glibc)
import Glibc
import Synchronization
#endif

/// The one write loop and read call every file and socket writer goes through.
@Suite("POSIX descriptor I/O")
struct FileDescriptorTests {
    /// A no-op handler installed without SA_RESTART, so a signal makes a blocked
    /// `write(2)` return early: a partial count, or EINTR when nothing was written yet.
    private static let interruptible: Void = {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(SIGUSR2, &action, nil)
    }()

    private final class Writer: Sendable {
        struct State {
            var thread: pthread_t?
            var error: POSIXFailure?
            var finished = false
        }
        let state = Mutex(State())
        /// The writer thread lives until the reader has sent its last signal: a signal
        /// to a thread that has exited could reach whichever thread reused its id.
        let release = DispatchSemaphore(value: 0)
    }

    @Test("writeAll delivers every byte through a small pipe while signals cut its writes short")
    func partialAndInterruptedWrites() throws {
        _ = Self.interruptible
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        defer { close(readEnd) }
        _ = fcntl(writeEnd, 1031 /* F_SETPIPE_SZ */, 4096)
        let sent = (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }
        let writer = Writer()
        defer { writer.release.signal() }
        Thread.detachNewThread {
            // Threads may inherit a mask that blocks the signal; this one must take it.
            var unblock = sigset_t()
            sigemptyset(&unblock)
            sigaddset(&unblock, SIGUSR2)
            pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
            writer.state.withLock { $0.thread = pthread_self() }
            var failure: POSIXFailure?
            do { try FileDescriptor.writeAll(writeEnd, sent) } catch { failure = error as? POSIXFailure ?? POSIXFailure("write", errno: 0) }
            close(writeEnd)
            writer.state.withLock { $0.error = failure; $0.finished = true }
            _ = writer.release.wait(timeout: .now() + 60)
        }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 3000)
        var signals = 0
        while true {
            // Every wait is bounded: a writer that stopped early shows as a short read, not a hang.
            var ready = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
            try #require(poll(&ready, 1, 120_000) == 1, "the writer stalled after \(received.count) bytes")
            let n = try chunk.withUnsafeMutableBytes { try FileDescriptor.read(readEnd, into: $0.baseAddress!, count: $0.count) }
            if n == 0 { break }
            received += chunk[0..<n]
            if let thread = writer.state.withLock({ $0.finished ? nil : $0.thread }) {
                pthread_kill(thread, SIGUSR2)
                signals += 1
            }
        }
        // A bound on a writer that never finishes, not a speed (generous for a loaded machine).
        let done = Date().addingTimeInterval(60)
        while !writer.state.withLock({ $0.finished }), Date() < done { usleep(1000) }
        #expect(writer.state.withLock { $0.error } == nil)
        #expect(signals > 10)
        #expect(received.count == sent.count)
        // A Bool: a failed comparison of two 2 MiB arrays would be diffed for minutes.
        let same = received == sent
        #expect(same)
    }

    @Test("a full disk is ENOSPC, reported as disk full; a bad descriptor is not")
    func failures() throws {
        let full = open("/dev/full", O_WRONLY | O_CLOEXEC)
        try #require(full >= 0)
        defer { close(full) }
        let error = #expect(throws: POSIXFailure.self) { try FileDescriptor.writeAll(full, [UInt8](repeating: 1, count: 10)) }
        #expect(error?.errno == ENOSPC)
        #expect(error?.isDiskFull == true)
        let bad = #expect(throws: POSIXFailure.self) { try FileDescriptor.writeAll(-1, [UInt8(1)]) }
        #expect(bad?.errno == EBADF)
        #expect(bad?.isDiskFull == false)
        // Nothing to write is no call at all, even on a bad descriptor.
        try FileDescriptor.writeAll(-1, [UInt8]())
    }

    @Test("read returns what is there, then 0 at the end")
    func readToEnd() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        try FileDescriptor.writeAll(ends[1], Array("abc".utf8))
        close(ends[1])
        var buffer = [UInt8](repeating: 0, count: 16)
        let first = try buffer.withUnsafeMutableBytes { try FileDescriptor.read(ends[0], into: $0.baseAddress!, count: $0.count) }
        #expect(Array(buffer[0..<first]) == Array("abc".utf8))
        let second = try buffer.withUnsafeMutableBytes { try FileDescriptor.read(ends[0], into: $0.baseAddress!, count: $0.count) }
        #expect(second == 0)
    }

    @Test("FileHasher: size and SHA-256 of a file larger than its block, and of an empty one")
    func hasher() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hasher-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let bytes = (0..<((1 << 20) + 12345)).map { UInt8(truncatingIfNeeded: $0 * 31) }
        try FileSystem.writeAtomically(Data(bytes), to: "\(dir)/big")
        let digest = try FileHasher.digest(of: "\(dir)/big")
        #expect(digest.size == Int64(bytes.count))
        #expect(digest.sha256 == PackageFixture.sha256(bytes))
        try FileSystem.writeAtomically(Data(), to: "\(dir)/empty")
        #expect(try FileHasher.digest(of: "\(dir)/empty").sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test("writeAtomically, flushed or left to a later syncfs, replaces a file whole with its mode and leaves no temp file")
    func atomicWrite() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("atomic-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for durable in [true, false] {
            let path = "\(dir)/record-\(durable)"
            try FileSystem.writeAtomically(Data("old".utf8), to: path, durable: durable)
            try FileSystem.writeAtomically(Data("new bytes".utf8), to: path, mode: 0o444, durable: durable)
            #expect(FileManager.default.contents(atPath: path) == Data("new bytes".utf8))
            var st = stat()
            #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o444)
            try FileSystem.renameAtomically(path, to: "\(path).kept", durable: durable)
            #expect(!FileSystem.exists(path) && FileManager.default.contents(atPath: "\(path).kept") == Data("new bytes".utf8))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["record-false.kept", "record-true.kept"])
    }
}
