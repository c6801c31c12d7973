import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A program run by a test: the one way tests spawn processes, with `posix_spawn` and not
/// Foundation's `Process`.
///
/// On Linux, `Process.run()` (swift-corelibs-foundation before PR #5472, so Swift 6.3.1's)
/// lists `/proc/self/fd` in the parent to close inherited descriptors, copying each entry's
/// whole 256-byte name: once the test process holds about 1,300 descriptors (the flood
/// tests, or many servers at once on a loaded machine), the copy can read past glibc's
/// buffer and crash the whole test run. Here the child closes every descriptor above
/// stderr itself (`posix_spawn_file_actions_addclosefrom_np`: a `close_range` in the child),
/// and nothing in this process reads its descriptor table.
///
/// The surface is `Process`'s, as far as tests use it, and behaves the same: the child gets
/// a process group of its own, the standard streams are inherited unless set (a `Pipe`, a
/// `FileHandle`, or nil for /dev/null), and a pipe's other end is closed here after the
/// spawn. A thread of its own reaps the child, so `isRunning` turns false when it ends.
package final class ChildProcess: @unchecked Sendable {
    /// The program; an absolute path.
    package var executableURL: URL?
    package var arguments: [String]?
    /// This process's environment when nil.
    package var environment: [String: String]?
    package var currentDirectoryURL: URL?
    package var standardInput: Any? = FileHandle.standardInput
    package var standardOutput: Any? = FileHandle.standardOutput
    package var standardError: Any? = FileHandle.standardError

    /// The child's pid once `run()` returned, else 0.
    package private(set) var processIdentifier: Int32 = 0
    private let condition = NSCondition()
    /// The wait status once the child is reaped (guarded by `condition`).
    private var waitStatus: Int32?
    /// Async waiters resumed by the reaper (guarded by `condition`).
    private var exitWaiters: [CheckedContinuation<Void, Never>] = []

    package init() {}

    /// Starts the program; throws `POSIXError` when it cannot be started.
    package func run() throws {
        precondition(processIdentifier == 0, "a ChildProcess runs once")
        guard let path = executableURL?.path else { throw POSIXError(.ENOENT) }
        var actions = posix_spawn_file_actions_t()
        try Self.check(posix_spawn_file_actions_init(&actions))
        defer { posix_spawn_file_actions_destroy(&actions) }
        var closeHere: [FileHandle] = []
        for (target, stream) in [(STDIN_FILENO, standardInput), (STDOUT_FILENO, standardOutput), (STDERR_FILENO, standardError)] {
            switch stream {
            case let pipe as Pipe:
                // The child's end; the child does not keep this end (closefrom below), nor this process the other.
                let child = target == STDIN_FILENO ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                try Self.check(posix_spawn_file_actions_adddup2(&actions, child.fileDescriptor, target))
                closeHere.append(child)
            case let handle as FileHandle where handle === FileHandle.nullDevice || handle.fileDescriptor < 0:
                try Self.check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0))
            case let handle as FileHandle:
                if handle.fileDescriptor != target {
                    try Self.check(posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target))
                }
            default:
                try Self.check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0))
            }
        }
        if let directory = currentDirectoryURL?.path {
            try Self.check(Self.glibc.addChdir(&actions, directory))
        }
        try Self.check(Self.glibc.addCloseFrom(&actions, STDERR_FILENO + 1))
        var attributes = posix_spawnattr_t()
        try Self.check(posix_spawnattr_init(&attributes))
        defer { posix_spawnattr_destroy(&attributes) }
        // A process group of its own (pgid 0: its pid), as Foundation's Process gives it.
        try Self.check(posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP)))

        let argv = ([path] + (arguments ?? [])).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let envp = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0)=\($1)") } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var pid: pid_t = 0
        try Self.check(posix_spawn(&pid, path, &actions, &attributes, argv, envp))
        for handle in closeHere { try? handle.close() }
        processIdentifier = pid
        Thread.detachNewThread { [self, pid] in reap(pid) }
    }

    /// Waits for the child on this (dedicated) thread and records how it ended.
    private func reap(_ pid: pid_t) {
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
        condition.lock()
        // Reaped elsewhere (never done by these tests): recorded as exit status 255.
        waitStatus = result == pid ? status : 255 << 8
        let waiters = exitWaiters
        exitWaiters = []
        condition.broadcast()
        condition.unlock()
        for waiter in waiters { waiter.resume() }
    }

    /// True from `run()` until the child has ended and been reaped.
    package var isRunning: Bool {
        condition.lock()
        defer { condition.unlock() }
        return processIdentifier != 0 && waitStatus == nil
    }

    /// Waits until the child has ended (at once if it never ran) without holding a thread:
    /// the reaper resumes it. Async tests wait this way; `waitUntilExit` would block one
    /// of the cooperative pool's threads (two on a 2-core machine) for the child's whole run.
    package func exited() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            guard processIdentifier != 0, waitStatus == nil else {
                condition.unlock()
                continuation.resume()
                return
            }
            exitWaiters.append(continuation)
            condition.unlock()
        }
    }

    /// Blocks the calling thread until the child has ended (at once if it never ran): for
    /// code on a thread of its own; async code awaits `exited()`.
    package func waitUntilExit() {
        guard processIdentifier != 0 else { return }
        condition.lock()
        while waitStatus == nil { condition.wait() }
        condition.unlock()
    }

    /// SIGTERM.
    package func terminate() {
        precondition(processIdentifier != 0, "not running")
        kill(processIdentifier, SIGTERM)
    }

    /// SIGINT.
    package func interrupt() {
        precondition(processIdentifier != 0, "not running")
        kill(processIdentifier, SIGINT)
    }

    /// The exit status, or the signal that ended the child; only once it ended.
    package var terminationStatus: Int32 {
        let status = endedStatus
        // WIFEXITED, WEXITSTATUS and WTERMSIG are macros Swift does not import.
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    /// Whether the child exited or a signal ended it; only once it ended.
    package var terminationReason: Process.TerminationReason {
        endedStatus & 0x7f == 0 ? .exit : .uncaughtSignal
    }

    private var endedStatus: Int32 {
        condition.lock()
        defer { condition.unlock() }
        guard let waitStatus else { preconditionFailure("the process has not ended") }
        return waitStatus
    }

    private static func check(_ result: Int32) throws {
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
    }

    /// glibc's file actions that Swift's Glibc module does not declare (GNU extensions),
    /// looked up once: closefrom since glibc 2.34, chdir since 2.29.
    private struct GNUFileActions: @unchecked Sendable {
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        typealias Chdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
        let addCloseFrom: CloseFrom
        let addChdir: Chdir

        init() {
            let library = dlopen(nil, RTLD_NOW)
            guard let closeFrom = dlsym(library, "posix_spawn_file_actions_addclosefrom_np"),
                  let chdir = dlsym(library, "posix_spawn_file_actions_addchdir_np") else {
                fatalError("the tests need glibc 2.34 or later (posix_spawn_file_actions_addclosefrom_np)")
            }
            addCloseFrom = unsafeBitCast(closeFrom, to: CloseFrom.self)
            addChdir = unsafeBitCast(chdir, to: Chdir.self)
        }
    }

    private static let glibc = GNUFileActions()
}
