import Foundation
import Synchronization

/// Keeps the tests that hold over a thousand descriptors apart from each other and from
/// process spawns, and sizes them to the descriptor limit.
///
/// - Floods one at a time. The test process shares one descriptor table: three flood
///   cases and the CLI flood at once held about 8 000 (client and server ends), the
///   limit; every other in-process server then failed to accept (`EMFILE`) and every
///   client to connect, for as long as the floods lasted.
/// - No spawn during a flood. On Linux, Foundation's `Process.run()`
///   (swift-corelibs-foundation before PR #5472, so Swift 6.3.1's) copies each
///   `/proc/self/fd` entry's whole 256-byte name: once the process holds enough
///   descriptors (about 1300) to fill glibc's readdir buffer, the copy can read past it
///   and crash the whole test run. A flood waits for the spawns under way and holds new
///   ones (`CLI.run`) until it has let its sockets go.
package enum DescriptorFlood {
    private typealias State = (floods: Int, spawns: Int)
    private static let state = Mutex<State>((floods: 0, spawns: 0))
    /// Bounds on waiting for the other side: a hang, not a speed (floods take up to a
    /// couple of minutes each on a loaded machine, and there are four).
    private static let patience: Duration = .seconds(900)
    /// Descriptors left to the rest of the test process during a flood.
    private static let reserve = 2048

    /// How many sockets a flood may open: at most `wanted` and what the limit (raised with
    /// `HostileSocket.raiseDescriptorLimit`) leaves beyond the reserve, halved when the
    /// server is in this process and holds the other end of each.
    package static func budget(_ wanted: Int, serverInProcess: Bool) -> Int {
        let spare = HostileSocket.raiseDescriptorLimit(to: 1 << 16) - reserve
        return max(0, min(wanted, serverInProcess ? spare / 2 : spare))
    }

    /// Runs `body`, which opens many descriptors and closes them before it returns, while no
    /// other flood runs and no process is being spawned.
    package static func during<T>(_ body: () async throws -> T) async rethrows -> T {
        let deadline = ContinuousClock.now + patience
        await claim(until: deadline, when: { $0.floods == 0 }) { $0.floods += 1 }
        defer { state.withLock { $0.floods -= 1 } }
        while state.withLock({ $0.spawns }) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return try await body()
    }

    /// Runs `spawn` (a `Process.run()`) once no flood holds descriptors, waiting without
    /// blocking a thread.
    package static func spawn<T>(_ spawn: () throws -> T) async rethrows -> T {
        await claim(until: ContinuousClock.now + patience, when: { $0.floods == 0 }) { $0.spawns += 1 }
        defer { state.withLock { $0.spawns -= 1 } }
        return try spawn()
    }

    /// `spawn` for code on a thread of its own (`LocalHTTP.onThread`), never on the
    /// cooperative pool: it blocks that thread while a flood holds descriptors.
    package static func spawnOnThread<T>(_ spawn: () throws -> T) rethrows -> T {
        let deadline = ContinuousClock.now + patience
        while !tryClaim(until: deadline, when: { $0.floods == 0 }, { $0.spawns += 1 }) { usleep(20_000) }
        defer { state.withLock { $0.spawns -= 1 } }
        return try spawn()
    }

    /// Applies `take` to the state once `free` holds (checked and taken under one lock),
    /// waiting without blocking a thread; at `deadline` takes it anyway (a hang, not a speed).
    private static func claim(
        until deadline: ContinuousClock.Instant, when free: (State) -> Bool, _ take: (inout State) -> Void
    ) async {
        while !tryClaim(until: deadline, when: free, take) { try? await Task.sleep(for: .milliseconds(20)) }
    }

    /// One attempt of `claim`: applies `take` if `free` holds or `deadline` has passed.
    private static func tryClaim(
        until deadline: ContinuousClock.Instant, when free: (State) -> Bool, _ take: (inout State) -> Void
    ) -> Bool {
        state.withLock { state in
            guard free(state) || ContinuousClock.now >= deadline else { return false }
            take(&state)
            return true
        }
    }
}
