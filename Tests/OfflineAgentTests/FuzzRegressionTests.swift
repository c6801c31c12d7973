import CBspatch
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Every input the fuzzers (scripts/fuzz.sh) ever crashed on, kept in
/// `fixtures/fuzz/regressions/<target>-<what>` and fed to the real parser, which must
/// now refuse it with one clean error. A new file there is picked up without code.
@Suite("Fuzz regressions")
struct FuzzRegressionTests {
    static let directory = "\(Repo.fixtures)/fuzz/regressions"
    static let targets = ["bspatch", "cbz", "zip", "manifest", "setcookie"]

    static func inputs(_ target: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasPrefix("\(target)-") }.sorted()
    }

    static func bytes(_ name: String) throws -> Data {
        try #require(FileManager.default.contents(atPath: "\(directory)/\(name)"))
    }

    @Test("every regression input names the target it belongs to")
    func namesAreKnown() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.directory)
        #expect(!names.isEmpty)
        for name in names {
            #expect(Self.targets.contains { name.hasPrefix("\($0)-") }, "\(name): unknown target prefix")
        }
    }

    @Test("zip: the central-directory reader and the extractor refuse it as a corrupt archive",
          arguments: inputs("zip"))
    func zip(name: String) throws {
        let path = "\(Self.directory)/\(name)"
        let error = try #require(throws: OfflineAgentError.self) { try ZipCentralDirectory.rawNames(of: path) }
        #expect(error.code == .extract)
        #expect(error.cause == .archiveCorrupt)
        let scratch = TemporaryDirectory("fuzz-zip")
        let destination = scratch.url.appendingPathComponent("out")
        let extractError = try #require(throws: OfflineAgentError.self) {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: path), to: destination)
        }
        #expect(extractError.code == .extract)
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
    }

    @Test("manifest: refused as an invalid manifest", arguments: inputs("manifest"))
    func manifest(name: String) throws {
        let error = try #require(throws: OfflineAgentError.self) { try Manifest.decode(Self.bytes(name)) }
        #expect(error.cause == .manifestInvalid)
    }

    @Test("Set-Cookie: parsed without a crash, and any cookie stays within the limits", arguments: inputs("setcookie"))
    func setCookie(name: String) throws {
        let header = String(decoding: try Self.bytes(name), as: UTF8.self)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        if let cookie = SetCookie.parse(header, from: URL(string: "https://app.example.com/a/b")!, now: now) {
            #expect(cookie.expires.map { $0 <= now.addingTimeInterval(SetCookie.maxLifetime) } ?? true)
        }
        _ = CookieDate.parse(header)
    }

    /// Applies on a thread of its own and gives up waiting after a minute: some of these
    /// inputs once hung the applier (a deadlock between its threads). Nil (and an issue
    /// recorded) when it did not finish. The wait too is on a thread of its own: the cases
    /// run at once, and each would hold one of the cooperative pool's threads.
    static func applyBounded(old: URL, patch: URL, to new: URL, name: String) async -> Outcome? {
        let outcome = Outcome()
        Thread {
            do {
                try Patcher.apply(old: old, patch: patch, to: new, durable: false)
                outcome.finish(nil)
            } catch {
                outcome.finish(error)
            }
        }.start()
        guard await outcome.finished(within: 60) else {
            Issue.record("\(name): the patch was not applied or refused within 60 s")
            return nil
        }
        return outcome
    }

    @Test("bspatch: refused with a patch-invalid cause within a bounded time, nothing written",
          arguments: inputs("bspatch"))
    func bspatch(name: String) async throws {
        let scratch = TemporaryDirectory("fuzz-bspatch")
        let old = URL(fileURLWithPath: "\(Repo.fixtures)/fuzz/bspatch-old.bin")
        let patch = URL(fileURLWithPath: "\(Self.directory)/\(name)")
        let new = scratch.url.appendingPathComponent("new")
        guard let outcome = await Self.applyBounded(old: old, patch: patch, to: new, name: name) else { return }
        let error = try #require(outcome.error as? OfflineAgentError, "\(name) was applied")
        #expect(error.code == .patch)
        #expect(error.cause == .patchInvalid)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
    }

    @Test("bspatch: one verdict whichever bzip2 decoder runs (CBspatch's own, or libbz2 for every stream)",
          arguments: inputs("bspatch"))
    func bspatchDecoders(name: String) async throws {
        // A corrupt block can make two decoders hand over different amounts of output
        // before its error; the control triples could then end inside that output with
        // one ("goes on past": control) and past it with the other (bzip2).
        let scratch = TemporaryDirectory("fuzz-bspatch-decoders")
        let old = URL(fileURLWithPath: "\(Repo.fixtures)/fuzz/bspatch-old.bin")
        let patch = URL(fileURLWithPath: "\(Self.directory)/\(name)")
        defer { cbspatch_testing_faults(0, 0) }
        var statuses: [Int32?] = []
        for decline in [0, 1] { // 1: the fast decoder declines every stream's first block
            cbspatch_testing_faults(Int32(decline), 0)
            let new = scratch.url.appendingPathComponent("new-\(decline)")
            guard let outcome = await Self.applyBounded(old: old, patch: patch, to: new, name: name) else { return }
            statuses.append(((outcome.error as? OfflineAgentError)?.underlying as? PatchFailure)?.status)
        }
        #expect(statuses[0] != nil, "\(name) was applied")
        #expect(statuses[0] == statuses[1], "fast decoder: \(statuses[0].map(String.init) ?? "ok"), libbz2: \(statuses[1].map(String.init) ?? "ok")")
    }

    /// The result of an apply running on another thread.
    final class Outcome: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        private(set) var error: (any Error)?
        func finish(_ error: (any Error)?) {
            self.error = error // written before the signal, read after the wait
            done.signal()
        }

        /// Whether the apply ended within `seconds`, waited for on a thread of its own.
        func finished(within seconds: Int) async -> Bool {
            (try? await LocalHTTP.onThread { self.done.wait(timeout: .now() + .seconds(seconds)) == .success }) ?? false
        }
    }
}
