import OfflineAgent
import Foundation
import Testing

/// Deterministic pseudo-random bytes (SplitMix64), so fuzz and data tests repeat exactly.
package struct SplitMix64: RandomNumberGenerator {
    package var state: UInt64

    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Lists every file and directory under `path` (relative), sorted.
package func tree(_ path: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: path) else { return [] }
    return (enumerator.allObjects as? [String] ?? []).sorted()
}
