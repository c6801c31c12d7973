import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// `Store.transaction`: the objects an install step stores are collected on every way
/// out but a commit, without a call of its own on any branch.
@Suite("Install transaction")
struct InstallTransactionTests {
    struct Stopped: Error {}

    enum Exit: String, CaseIterable, Sendable { case throwing, returnWithoutCommit, commit }

    /// Stores one object named by its hash, as the splitter and the extractor do.
    static func storeObject(_ objects: ObjectStore, _ bytes: [UInt8]) throws -> String {
        let name = SHA256.hash(data: Data(bytes)).map { String(format: "%02x", $0) }.joined()
        let temp = try objects.createTemporary()
        defer { close(temp.fd) }
        try FileDescriptor.writeAll(temp.fd, Data(bytes))
        try objects.nameTemporary(temp.name, as: name)
        return name
    }

    @Test("an object no version links is collected unless the step commits; one a version links always stays", arguments: Exit.allCases)
    func exits(_ exit: Exit) throws {
        let scratch = TemporaryDirectory("transaction")
        let store = Store(root: scratch.path)
        let objects = try ObjectStore(root: store.root)
        // An object a version links (link count 2) before the step: never collected.
        let linked = try Self.storeObject(objects, Array("linked".utf8))
        try FileManager.default.createDirectory(atPath: "\(scratch.path)/tree", withIntermediateDirectories: true)
        #expect(link("\(objects.directory)/\(linked)", "\(scratch.path)/tree/file") == 0)
        var stored = ""
        do {
            try store.transaction { transaction in
                stored = try Self.storeObject(objects, Array("stored by the step".utf8))
                switch exit {
                case .throwing: throw Stopped()
                case .returnWithoutCommit: return
                case .commit: transaction.commit()
                }
            }
        } catch is Stopped {}
        #expect(FileManager.default.fileExists(atPath: "\(objects.directory)/\(stored)") == (exit == .commit))
        #expect(FileManager.default.fileExists(atPath: "\(objects.directory)/\(linked)"))
    }
}
