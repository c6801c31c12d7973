import Foundation
import Synchronization

/// Keeps process spawns apart from the tests that hold over a thousand descriptors.
///
/// On Linux, Foundation's `Process.run()` (swift-corelibs-foundation before PR #5472, so
/// Swift 6.3.1's) copies each `/proc/self/fd` entry's whole 256-byte name: once the test
/// process holds enough descriptors (about 1300) to fill glibc's readdir buffer, the copy
/// can read past it and crash the whole test run. The connection-flood tests hold 1200
/// sockets and more; every other test may spawn at the same time. A flood waits for the
/// spawns under way and holds new ones (`CLI.run`) until it has let its sockets go.
package enum DescriptorFlood {
    private static let state = Mutex((floods: 0, spawns: 0))
    /// Bounds on waiting for the other side: a hang, not a speed.
    private static let patience: Duration = .seconds(300)

    /// Runs `body`, which opens many descriptors and closes them before it returns, while no
    /// process is being spawned.
    package static func during<T>(_ body: () async throws -> T) async rethrows -> T {
        state.withLock { $0.floods += 1 }
        defer { state.withLock { $0.floods -= 1 } }
        let deadline = ContinuousClock.now + patience
        while state.withLock({ $0.spawns }) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return try await body()
    }

    /// Runs `spawn` (a `Process.run()`) once no flood holds descriptors, waiting without
    /// blocking a thread.
    package static func spawn<T>(_ spawn: () throws -> T) async rethrows -> T {
        let deadline = ContinuousClock.now + patience
        while !state.withLock({ state in
            guard state.floods == 0 else { return false }
            state.spawns += 1
            return true
        }) {
            if ContinuousClock.now >= deadline {
                state.withLock { $0.spawns += 1 }
                break
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        defer { state.withLock { $0.spawns -= 1 } }
        return try spawn()
    }
}
