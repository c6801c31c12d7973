import Foundation
import Synchronization

/// Keeps the tests that hold over a thousand descriptors apart from each other, and sizes
/// them to the descriptor limit.
///
/// Floods one at a time: the test process shares one descriptor table. Three flood cases
/// and the CLI flood at once held about 8 000 (client and server ends), the limit; every
/// other in-process server then failed to accept (`EMFILE`) and every client to connect,
/// for as long as the floods lasted. (Processes may be spawned during a flood: tests spawn
/// with `ChildProcess`, which never reads the descriptor table.)
package enum DescriptorFlood {
    private static let floods = Mutex(0)
    /// Bounds on waiting for another flood: a hang, not a speed (floods take up to a
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
    /// other flood runs; waits for one without blocking a thread, and past `patience` runs
    /// anyway (a hang elsewhere, not a speed).
    package static func during<T>(_ body: () async throws -> T) async rethrows -> T {
        let deadline = ContinuousClock.now + patience
        while !floods.withLock({ count in
            guard count == 0 || ContinuousClock.now >= deadline else { return false }
            count += 1
            return true
        }) {
            try? await Task.sleep(for: .milliseconds(20))
        }
        defer { floods.withLock { $0 -= 1 } }
        return try await body()
    }
}
