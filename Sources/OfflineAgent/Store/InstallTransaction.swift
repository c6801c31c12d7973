/// The objects an install step stores before a version links them, collected unless the
/// step commits: a step that throws, or returns without `commit()`, leaves nothing in
/// `objects/` that no version links. Run through `Store.transaction(_:)`, so no failure
/// branch (old or new) needs its own call to collect.
///
/// Collecting takes only objects no version links (`ObjectStore.collectGarbage`): a
/// failure after a tree linked them, or another app's objects, are never touched.
/// Callers hold the root lock, which every app's install takes.
struct InstallTransaction: ~Copyable {
    private(set) var isCommitted = false

    /// What the step stored is in use (linked by a version) or handed on to a step that
    /// runs its own transaction: not collected when the step returns.
    mutating func commit() { isCommitted = true }
}

extension Store {
    /// Runs `body` as an install transaction: on any error it throws, and on a return
    /// without `commit()`, the objects no version links are collected before this returns.
    func transaction<T>(_ body: (inout InstallTransaction) throws -> T) rethrows -> T {
        var transaction = InstallTransaction()
        let result: T
        do {
            result = try body(&transaction)
        } catch {
            collectObjects()
            throw error
        }
        if !transaction.isCommitted { collectObjects() }
        return result
    }
}
