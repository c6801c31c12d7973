import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The tests' one spawner: it starts programs while this process holds thousands of
/// descriptors (Foundation's `Process.run()` could crash the whole run there), the child
/// inherits none of them, and it keeps `Process`'s behaviour for streams, directory and exit.
@Suite("ChildProcess: the tests' spawner")
struct ChildProcessTests {
    /// Runs `/bin/sh -c script` to its end; its stdout.
    static func shell(_ script: String, configure: (ChildProcess) -> Void = { _ in }) throws -> (ChildProcess, String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        let out = Pipe()
        process.standardOutput = out
        configure(process)
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
        process.waitUntilExit()
        return (process, text)
    }

    @Test("spawns while this process holds 2,000 descriptors, and the child inherits none of them")
    func manyDescriptors() async throws {
        let count = DescriptorFlood.budget(2000, serverInProcess: false)
        try #require(count >= 1500, "descriptor limit too low")
        let listed = try await DescriptorFlood.during { () throws -> [String] in
            let fds = (0..<count).map { _ in open("/dev/null", O_RDONLY) }
            defer { for fd in fds where fd >= 0 { close(fd) } }
            #expect(fds.allSatisfy { $0 >= 0 })
            // Several spawns, as a full run makes while a flood holds its sockets.
            return try (0..<8).map { _ in try Self.shell("ls /proc/self/fd").1 }
        }
        for text in listed {
            // 0, 1, 2 and the directory ls reads.
            #expect(text.split(separator: "\n").count <= 4, "\(text)")
        }
    }

    @Test("exit status, a signal, stdin from a pipe, nil streams on /dev/null, the directory and environment given")
    func behaviour() async throws {
        let (exited, _) = try Self.shell("exit 3")
        #expect(exited.terminationReason == .exit && exited.terminationStatus == 3 && !exited.isRunning)

        let (killed, _) = try Self.shell("kill -9 $$")
        #expect(killed.terminationReason == .uncaughtSignal && killed.terminationStatus == SIGKILL)

        let input = Pipe()
        let echo = ChildProcess()
        echo.executableURL = URL(fileURLWithPath: "/bin/cat")
        echo.standardInput = input
        let out = Pipe()
        echo.standardOutput = out
        try echo.run()
        #expect(echo.isRunning)
        try input.fileHandleForWriting.write(contentsOf: Data("through the pipe".utf8))
        try input.fileHandleForWriting.close()
        #expect(String(decoding: out.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self) == "through the pipe")
        echo.waitUntilExit()
        #expect(echo.terminationStatus == 0)

        let (nulls, text) = try Self.shell("readlink /proc/self/fd/0 /proc/self/fd/2; pwd; echo $CHILD_PROCESS_TEST") { process in
            process.standardInput = nil
            process.standardError = nil
            process.currentDirectoryURL = URL(fileURLWithPath: "/usr")
            process.environment = ["CHILD_PROCESS_TEST": "given", "PATH": "/usr/bin:/bin"]
        }
        #expect(nulls.terminationStatus == 0 && text == "/dev/null\n/dev/null\n/usr\ngiven\n")

        let missing = ChildProcess()
        missing.executableURL = URL(fileURLWithPath: "/nonexistent/program")
        #expect(throws: POSIXError.self) { try missing.run() }
    }

    @Test("exited() resumes its waiters when the child ends (no thread held meanwhile), and returns at once after that or when it never ran")
    func exitedResumes() async throws {
        await ChildProcess().exited()
        let input = Pipe()
        let child = ChildProcess()
        child.executableURL = URL(fileURLWithPath: "/bin/sh")
        child.arguments = ["-c", "read line; exit 5"]
        child.standardInput = input
        try child.run()
        // Two waiters, likely registered before the end: the child waits for its line.
        async let first: Void = child.exited()
        async let second: Void = child.exited()
        try input.fileHandleForWriting.write(contentsOf: Data("go\n".utf8))
        try input.fileHandleForWriting.close()
        _ = await (first, second)
        #expect(!child.isRunning && child.terminationReason == .exit && child.terminationStatus == 5)
        await child.exited()
    }
}
