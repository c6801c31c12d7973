import Foundation
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

/// A value behind a lock, for state shared by concurrent request handlers.
package final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) { self.value = value }

    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
