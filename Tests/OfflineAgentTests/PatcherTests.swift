import CBspatch
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The BSDIFF40 applier: byte-identical results for patches made by the reference
/// `bsdiff`, and a distinct refusal (never a crash, never a stray file) for hostile ones.
@Suite("Patcher")
struct PatcherTests {
    // MARK: - Reference patches apply byte-identically

    @Test("reference bsdiff patches of the sample app (stored and deflated zips) apply byte-identically",
          arguments: ["-0", "-9"])
    func sampleAppPackages(level: String) async throws {
        let dir = TemporaryDirectory("patcher-app")
        let versions = try PatchWork.bundleVersions(in: dir)
        var zips: [String: String] = [:]
        for (version, root) in versions {
            let zip = dir.file("\(version)\(level).zip")
            // -X: no extra attributes, so only real content differs between versions.
            let result = try await run("zip", ["-q", level, "-X", "-r", zip, "."], cwd: root)
            #expect(result.status == 0, "zip: \(result.stderr)")
            zips[version] = zip
        }
        let names = versions.map(\.version)
        // Every upgrade step, a jump and a downgrade.
        var pairs = zip(names, names.dropFirst()).map { ($0, $1) }
        pairs.append((names.first!, names.last!))
        pairs.append((names.last!, names.first!))
        for (from, to) in pairs {
            let patch = dir.file("\(from)-\(to)\(level).bsdiff")
            try await PatchWork.bsdiff(zips[from]!, zips[to]!, patch)
            let out = dir.file("out-\(from)-\(to)\(level).zip")
            let expected = try PatchWork.bytes(zips[to]!)
            try Patcher.apply(old: URL(fileURLWithPath: zips[from]!), patch: URL(fileURLWithPath: patch),
                              to: URL(fileURLWithPath: out), expectedSize: Int64(expected.count))
            #expect(try PatchWork.bytes(out) == expected, "\(from) -> \(to) (\(level))")
            let header = try Patcher.header(of: URL(fileURLWithPath: patch))
            #expect(header.newSize == Int64(expected.count))
            #expect(header.controlLength > 0 && header.diffLength > 0)
            #expect(try PatchWork.bytes(patch).count >= 32 + Int(header.controlLength + header.diffLength))
        }
        #expect(PatchWork.strayFiles(in: dir.path).isEmpty)
    }

    @Test("a patch with backward seeks in old (swapped blocks, z < 0) applies")
    func negativeSeeks() async throws {
        let dir = TemporaryDirectory("patcher-seek")
        var rng = SplitMix64(seed: 0xB10C)
        let a = PatchWork.randomBytes(96 * 1024, &rng)
        let b = PatchWork.randomBytes(96 * 1024, &rng)
        let c = PatchWork.randomBytes(64 * 1024, &rng)
        var bEdited = b
        for i in stride(from: 500, to: bEdited.count, by: 7919) { bEdited[i] &+= 1 }
        let old = a + b + c
        let new = c + bEdited + a + Array("tail".utf8) // everything moved, mostly backwards
        let patch = try await PatchWork.referencePatch(old, new, in: dir)
        let triples = try PatchWork.controlTriples(of: patch, in: dir)
        #expect(triples.contains { $0.z < 0 }, "expected a negative seek in \(triples)")
        #expect(try PatchWork.applied(old, patch, in: dir) == new)
    }

    @Test("a multi-megabyte patch of pseudo-random content with edits applies byte-identically")
    func multiMegabyte() async throws {
        let dir = TemporaryDirectory("patcher-big")
        var rng = SplitMix64(seed: 0x4D_42)
        let old = PatchWork.randomBytes(4_500_000, &rng)
        var new = old
        // Scattered byte edits, an insertion, a deletion, a moved block and an append.
        for _ in 0..<400 {
            let i = Int.random(in: 0..<new.count, using: &rng)
            new[i] = UInt8.random(in: 0...255, using: &rng)
        }
        new.insert(contentsOf: PatchWork.randomBytes(20_000, &rng), at: 1_000_000)
        new.removeSubrange(2_500_000..<2_530_000)
        let moved = Array(new[3_000_000..<3_100_000])
        new.removeSubrange(3_000_000..<3_100_000)
        new.insert(contentsOf: moved, at: 200_000)
        new += PatchWork.randomBytes(50_000, &rng)
        let patch = try await PatchWork.referencePatch(old, new, in: dir)
        #expect(new.count >= 4 * 1024 * 1024)
        let out = try PatchWork.applied(old, patch, in: dir)
        #expect(out.count == new.count)
        #expect(out == new)
    }

    @Test("falling back from the fast bzip2 decoder to libbz2 mid-stream changes nothing (injected faults)")
    func decoderFallbacks() throws {
        let dir = TemporaryDirectory("patcher-faults")
        var rng = SplitMix64(seed: 0xFA11)
        // Multi-block streams, so a fall-back can happen after whole blocks were used:
        // a 3 MB sparse diff (two bzip2 blocks) and 2 MB of fresh bytes (three blocks,
        // which the extra stream's two workers split between them).
        let old = PatchWork.randomBytes(3_000_000, &rng)
        let diff = (0..<old.count).map { UInt8($0 % 16 == 0 ? 1 : 0) }
        let extra = PatchWork.randomBytes(2_000_000, &rng)
        let total = Int64(old.count + extra.count)
        let patch = try PatchWork.patch([(Int64(old.count), Int64(extra.count), 0)], diff: diff, extra: extra,
                                        newSize: total, in: dir)
        let expected = zip(old, diff).map { $0 &+ $1 } + extra
        // Process-wide, but harmless to other tests running meanwhile: a fault only
        // moves work to libbz2, which is the point of this test.
        defer { cbspatch_testing_faults(0, 0) }
        for (decline, split) in [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (2, 1)] {
            cbspatch_testing_faults(Int32(decline), Int32(split))
            #expect(try PatchWork.applied(old, patch, in: dir) == expected, "decline block \(decline), split \(split)")
        }
    }

    @Test("a new file over 8 MiB decodes its diff stream with the compact block layout, byte-identically")
    func compactDiffLayout() throws {
        // Below 8 MiB the diff stream uses the fast layout (see CBSPATCH_DIFF_FAST_BELOW),
        // which every other test exercises; this one covers the other, over several blocks.
        let dir = TemporaryDirectory("patcher-compact")
        var rng = SplitMix64(seed: 0xC0DE)
        let old = PatchWork.randomBytes(9 * 1024 * 1024, &rng)
        let diff: [UInt8] = (0..<old.count).map { i in i % 7 == 0 ? UInt8(truncatingIfNeeded: i >> 8) : 0 }
        let patch = try PatchWork.patch([(Int64(old.count), 0, 0)], diff: diff, extra: [], newSize: Int64(old.count), in: dir)
        #expect(try PatchWork.applied(old, patch, in: dir) == zip(old, diff).map { $0 &+ $1 })
    }

    @Test("old and new may be the same file; an existing target is replaced")
    func inPlace() async throws {
        let dir = TemporaryDirectory("patcher-inplace")
        let old = Array("hello, old world. ".utf8) + Array(repeating: UInt8(ascii: "x"), count: 3000)
        var new = old
        new[3] = UInt8(ascii: "L")
        new += Array(" and more".utf8)
        let patch = try await PatchWork.referencePatch(old, new, in: dir)
        let file = dir.file("package.zip")
        try Data(old).write(to: URL(fileURLWithPath: file))
        try Data(patch).write(to: URL(fileURLWithPath: dir.file("p")))
        try Patcher.apply(old: URL(fileURLWithPath: file), patch: URL(fileURLWithPath: dir.file("p")),
                          to: URL(fileURLWithPath: file))
        #expect(try PatchWork.bytes(file) == new)
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o644)
    }

    // MARK: - Hostile patches

    @Test("hostile patches are refused with their own status and leave no file behind",
          arguments: HostileCase.all)
    func hostile(_ hostile: HostileCase) throws {
        let dir = TemporaryDirectory("patcher-hostile")
        let old = dir.file("old")
        try Data(HostileCase.oldBytes).write(to: URL(fileURLWithPath: old))
        let patch = dir.file("patch")
        try Data(try hostile.build(dir)).write(to: URL(fileURLWithPath: patch))
        let outDir = dir.file("out")
        try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: false)
        let target = "\(outDir)/new"
        if hostile.existingTarget {
            try Data("previous".utf8).write(to: URL(fileURLWithPath: target))
        }
        do {
            try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patch),
                              to: URL(fileURLWithPath: target), expectedSize: hostile.expectedSize)
            Issue.record("\(hostile.name): applied, expected status \(hostile.status)")
        } catch let error as OfflineAgentError {
            #expect(error.code == .patch)
            let cause = error.underlying as? PatchFailure
            #expect(cause?.status == hostile.status,
                    "\(hostile.name): got \(cause?.description ?? "no cause"): \(error.reason)")
            #expect(!error.reason.isEmpty)
            if let fragment = hostile.reasonContains {
                #expect(error.reason.contains(fragment), "\(hostile.name): \(error.reason)")
            }
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: outDir)
        #expect(left == (hostile.existingTarget ? ["new"] : []), "\(hostile.name) left \(left)")
        if hostile.existingTarget {
            #expect(try PatchWork.bytes(target) == Array("previous".utf8))
        }
    }

    /// Found by fuzzing: the control worker, reading old bytes ahead, stopped at the
    /// refused triple and dropped the reads of the valid triples before it, so the
    /// apply waited for them forever once the control ring was full. A long control
    /// stream (past the ring's three 64 KiB slots) after the refused triple fills it.
    @Test("a refused triple after a valid one in a long control stream is refused, never a hang",
          arguments: [
              ("negative x", (-1, 0, 0), PatchFailure.control),
              ("old read past the end", (2000, 0, 0), PatchFailure.bounds),
              ("extra past new size", (0, 500, 0), PatchFailure.bounds),
              ("z overflows", (10, 0, Int64.max), PatchFailure.control),
          ] as [(String, (Int64, Int64, Int64), Int32)])
    func refusedTripleAfterValidOne(name: String, bad: (Int64, Int64, Int64), status: Int32) async throws {
        let dir = TemporaryDirectory("patcher-prefetch-stop")
        let old = dir.file("old"), patch = dir.file("patch"), new = dir.file("new")
        try Data(HostileCase.oldBytes).write(to: URL(fileURLWithPath: old))
        let triples = [(50, 0, 0), bad] + Array(repeating: (0, 0, 0), count: 12_000)
        try Data(try PatchWork.patch(triples, diff: Array(repeating: 1, count: 60), extra: [], newSize: 100, in: dir))
            .write(to: URL(fileURLWithPath: patch))
        let outcome = FuzzRegressionTests.Outcome()
        Thread {
            do {
                try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patch),
                                  to: URL(fileURLWithPath: new), durable: false)
                outcome.finish(nil)
            } catch {
                outcome.finish(error)
            }
        }.start()
        guard await outcome.finished(within: 60) else {
            Issue.record("\(name): neither applied nor refused within 60 s")
            return
        }
        let error = try #require(outcome.error as? OfflineAgentError, "\(name) was applied")
        #expect((error.underlying as? PatchFailure)?.status == status, "\(name): \(error.reason)")
        #expect(error.cause == .patchInvalid)
        #expect(!FileManager.default.fileExists(atPath: new))
    }

    @Test("every hostile case has a distinct reason")
    func distinctReasons() throws {
        let dir = TemporaryDirectory("patcher-reasons")
        let old = dir.file("old")
        try Data(HostileCase.oldBytes).write(to: URL(fileURLWithPath: old))
        var seen: [String: String] = [:]
        for hostile in HostileCase.all {
            let patch = dir.file("\(hostile.name).patch")
            try Data(try hostile.build(dir)).write(to: URL(fileURLWithPath: patch))
            do {
                try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patch),
                                  to: URL(fileURLWithPath: dir.file("new")), expectedSize: hostile.expectedSize)
            } catch let error as OfflineAgentError {
                // Numbers differ between some cases; compare the wording only.
                let shape = error.reason.replacingOccurrences(of: "[-0-9]+", with: "#", options: .regularExpression)
                if let other = seen[shape] {
                    Issue.record("\(hostile.name) and \(other) share the reason \(error.reason)")
                }
                seen[shape] = hostile.name
            }
        }
    }

    @Test("local failures: missing old, missing patch, missing output directory, negative expected size")
    func localFailures() async throws {
        let dir = TemporaryDirectory("patcher-local")
        let old = Array(repeating: UInt8(7), count: 100)
        let patch = try await PatchWork.referencePatch(old, old + [1, 2, 3], in: dir)
        try Data(patch).write(to: URL(fileURLWithPath: dir.file("p")))
        try Data(old).write(to: URL(fileURLWithPath: dir.file("old")))
        let cases: [(String, String, String, Int64?, Int32)] = [
            (dir.file("missing"), dir.file("p"), dir.file("new"), nil, PatchFailure.io),
            (dir.file("old"), dir.file("missing"), dir.file("new"), nil, PatchFailure.io),
            (dir.file("old"), dir.file("p"), dir.file("no/such/dir/new"), nil, PatchFailure.io),
            (dir.file("old"), dir.file("p"), dir.file("new"), -5, PatchFailure.argument),
            (dir.file("old"), dir.file("p"), dir.path, nil, PatchFailure.io), // target is a directory
        ]
        for (old, patch, new, expected, status) in cases {
            #expect(PatchWork.status {
                try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patch),
                                  to: URL(fileURLWithPath: new), expectedSize: expected)
            } == status, "\(old) \(patch) \(new)")
        }
        #expect(PatchWork.status { _ = try Patcher.header(of: URL(fileURLWithPath: dir.file("old"))) }
            == PatchFailure.magic)
        #expect(PatchWork.strayFiles(in: dir.path).isEmpty)
    }

    // MARK: - Fuzz

    @Test("300 seeded mutations of a valid patch: refused or consistent, never a crash or a stray file")
    func fuzz() async throws {
        let dir = TemporaryDirectory("patcher-fuzz")
        var rng = SplitMix64(seed: 0xF022_2024)
        // A realistic base: a text-like old file and an edited new one, so all three
        // streams are non-trivial.
        let old = PatchWork.textLike(40_000, &rng)
        var new = old
        for _ in 0..<60 {
            let i = Int.random(in: 0..<new.count - 200, using: &rng)
            new.replaceSubrange(i..<i + Int.random(in: 0...8, using: &rng),
                                with: PatchWork.textLike(Int.random(in: 0...40, using: &rng), &rng))
        }
        let valid = try await PatchWork.referencePatch(old, new, in: dir)
        let oldPath = dir.file("old")
        try Data(old).write(to: URL(fileURLWithPath: oldPath))
        let outDir = dir.file("out")
        try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: false)
        var outcomes: [String: Int] = [:]
        for iteration in 0..<300 {
            var patch = valid
            switch Int.random(in: 0..<4, using: &rng) {
            case 0: // flip a few bytes anywhere
                for _ in 0..<Int.random(in: 1...6, using: &rng) {
                    patch[Int.random(in: 0..<patch.count, using: &rng)] ^= UInt8.random(in: 1...255, using: &rng)
                }
            case 1: // truncate
                patch.removeSubrange(Int.random(in: 0..<patch.count, using: &rng)...)
            case 2: // flip bits in the header's lengths
                patch[Int.random(in: 8..<32, using: &rng)] ^= UInt8(1) << UInt8.random(in: 0...7, using: &rng)
            default: // overwrite a run with random bytes
                let start = Int.random(in: 0..<patch.count, using: &rng)
                let end = min(patch.count, start + Int.random(in: 1...64, using: &rng))
                for i in start..<end { patch[i] = UInt8.random(in: 0...255, using: &rng) }
            }
            let patchPath = dir.file("fuzz.patch")
            try Data(patch).write(to: URL(fileURLWithPath: patchPath))
            let target = "\(outDir)/new"
            do {
                try Patcher.apply(old: URL(fileURLWithPath: oldPath), patch: URL(fileURLWithPath: patchPath),
                                  to: URL(fileURLWithPath: target))
                let size = try Patcher.header(of: URL(fileURLWithPath: patchPath)).newSize
                #expect(Int64(try PatchWork.bytes(target).count) == size, "iteration \(iteration)")
                outcomes["ok", default: 0] += 1
                try FileManager.default.removeItem(atPath: target)
            } catch let error as OfflineAgentError {
                #expect(error.code == .patch, "iteration \(iteration): \(error)")
                let cause = try #require(error.underlying as? PatchFailure, "iteration \(iteration)")
                #expect(cause.status != PatchFailure.io && cause.status != PatchFailure.noMemory,
                        "iteration \(iteration): \(error)")
                outcomes[cause.name, default: 0] += 1
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: outDir)
            #expect(left.isEmpty, "iteration \(iteration) left \(left)")
        }
        // The mutations reach past the header into the streams.
        #expect(outcomes["bzip2", default: 0] > 0, "\(outcomes)")
        #expect(outcomes["header", default: 0] > 0, "\(outcomes)")
    }
}

// MARK: - Hostile cases

/// One hand-made hostile patch and the status it must be refused with.
struct HostileCase: Sendable, CustomTestStringConvertible {
    let name: String
    let status: Int32
    var expectedSize: Int64? = nil
    var reasonContains: String? = nil
    /// A previous file at the target must survive the refusal untouched.
    var existingTarget = false
    let build: @Sendable (TemporaryDirectory) throws -> [UInt8]

    var testDescription: String { name }

    /// The old file every case applies to.
    static let oldBytes: [UInt8] = (0..<1024).map { UInt8($0 & 0xff) }
    static let max = Int64.max

    static let all: [HostileCase] = [
        HostileCase(name: "bad magic", status: PatchFailure.magic, reasonContains: "BSDIFF40", existingTarget: true) {
            var p = try valid($0)
            p[7] = UInt8(ascii: "9")
            return p
        },
        HostileCase(name: "truncated header", status: PatchFailure.header, reasonContains: "truncated") {
            Array(try valid($0).prefix(20))
        },
        HostileCase(name: "truncated streams", status: PatchFailure.bzip2, reasonContains: "end-of-stream",
                    existingTarget: true) {
            Array(try valid($0).dropLast(5))
        },
        HostileCase(name: "negative ctrl length", status: PatchFailure.header, reasonContains: "ctrl length -5 is negative") { _ in
            PatchWork.header(-5, 10, 10) + [UInt8](repeating: 0, count: 64)
        },
        HostileCase(name: "negative diff length", status: PatchFailure.header, reasonContains: "diff length -10 is negative") { _ in
            PatchWork.header(5, -10, 10) + [UInt8](repeating: 0, count: 64)
        },
        HostileCase(name: "negative new size", status: PatchFailure.header, reasonContains: "new size -10") { _ in
            PatchWork.header(5, 10, -10) + [UInt8](repeating: 0, count: 64)
        },
        HostileCase(name: "overflowing lengths", status: PatchFailure.header, reasonContains: "overflows") { _ in
            PatchWork.header(max, max, 10) + [UInt8](repeating: 0, count: 64)
        },
        HostileCase(name: "lengths past end of file", status: PatchFailure.header, reasonContains: "past the end") { _ in
            PatchWork.header(1000, 10, 10) + [UInt8](repeating: 0, count: 64)
        },
        HostileCase(name: "new size differs from expected", status: PatchFailure.sizeMismatch, expectedSize: 161,
                    existingTarget: true) {
            try valid($0)
        },
        HostileCase(name: "negative x", status: PatchFailure.control, reasonContains: "x=-1 is negative") {
            try PatchWork.patch([(-1, 10, 0)], diff: [], extra: Array(repeating: 1, count: 10), newSize: 10, in: $0)
        },
        HostileCase(name: "negative y", status: PatchFailure.control, reasonContains: "y=-1 is negative") {
            try PatchWork.patch([(10, -1, 0)], diff: Array(repeating: 0, count: 10), extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "x overflow", status: PatchFailure.control, reasonContains: "overflows new position") {
            try PatchWork.patch([(1, 0, 0), (max, 0, 0)], diff: [0], extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "y overflow", status: PatchFailure.control, reasonContains: "y=") {
            try PatchWork.patch([(1, max, 0)], diff: [0], extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "z overflow", status: PatchFailure.control, reasonContains: "seek z=") {
            try PatchWork.patch([(1, 0, max), (0, 0, max)], diff: [0], extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "write past new size", status: PatchFailure.bounds, reasonContains: "past new size") {
            try PatchWork.patch([(5, 10, 0)], diff: Array(repeating: 0, count: 5), extra: Array(repeating: 1, count: 10),
                                newSize: 10, in: $0)
        },
        HostileCase(name: "old read before start", status: PatchFailure.bounds,
                    reasonContains: "old read at -123 before start") {
            try PatchWork.patch([(0, 1, -123), (5, 0, 0)], diff: Array(repeating: 0, count: 5), extra: [1],
                                newSize: 6, in: $0)
        },
        HostileCase(name: "old read past end", status: PatchFailure.bounds, reasonContains: "past end of old") {
            try PatchWork.patch([(0, 0, 1020), (10, 0, 0)], diff: Array(repeating: 0, count: 10), extra: [],
                                newSize: 10, in: $0)
        },
        HostileCase(name: "stall of empty triples", status: PatchFailure.stall) {
            try PatchWork.patch(Array(repeating: (0, 0, 0), count: 70_000), diff: [], extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "bzip2 garbage", status: PatchFailure.bzip2) { _ in
            var rng = SplitMix64(seed: 1)
            let garbage = PatchWork.randomBytes(200, &rng)
            return PatchWork.header(Int64(garbage.count), 0, 10) + garbage
        },
        HostileCase(name: "corrupt bzip2 block", status: PatchFailure.bzip2, reasonContains: "data error") {
            var rng = SplitMix64(seed: 2)
            let diff = PatchWork.randomBytes(1000, &rng)
            let ctrl = try PatchWork.bzip2(PatchWork.control([(1000, 0, 0)]), in: $0)
            var diffStream = try PatchWork.bzip2(diff, in: $0)
            diffStream[diffStream.count / 2] ^= 0x55
            let extra = try PatchWork.bzip2([], in: $0)
            return PatchWork.header(Int64(ctrl.count), Int64(diffStream.count), 1000) + ctrl + diffStream + extra
        },
        HostileCase(name: "final position short of new size", status: PatchFailure.truncated,
                    reasonContains: "control stream ended") {
            try PatchWork.patch([(10, 0, 0)], diff: Array(repeating: 0, count: 10), extra: [], newSize: 20, in: $0)
        },
        HostileCase(name: "diff stream shorter than the triples", status: PatchFailure.truncated,
                    reasonContains: "diff stream ended") {
            try PatchWork.patch([(10, 0, 0)], diff: Array(repeating: 0, count: 5), extra: [], newSize: 10, in: $0)
        },
        HostileCase(name: "extra stream longer than the triples", status: PatchFailure.control,
                    reasonContains: "goes on past") {
            try PatchWork.patch([(100, 10, 50), (50, 0, 0)], diff: Array(repeating: 1, count: 150),
                                extra: Array(repeating: 69, count: 11), newSize: 160, in: $0)
        },
    ]

    /// A small valid patch against `oldBytes` (160 bytes out).
    static func valid(_ dir: TemporaryDirectory) throws -> [UInt8] {
        try PatchWork.patch([(100, 10, 50), (50, 0, 0)], diff: Array(repeating: 1, count: 150),
                            extra: Array(repeating: 69, count: 10), newSize: 160, in: dir)
    }
}

// MARK: - Helpers

enum PatchWork {
    static func bytes(_ path: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    static func randomBytes(_ count: Int, _ rng: inout SplitMix64) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(count + 8)
        while out.count < count {
            withUnsafeBytes(of: rng.next().littleEndian) { out.append(contentsOf: $0) }
        }
        return Array(out.prefix(count))
    }

    /// Text-like bytes (words of ASCII letters, spaces, newlines): compressible like web content.
    static func textLike(_ count: Int, _ rng: inout SplitMix64) -> [UInt8] {
        let words = ["function", "return", "const", "=>", "{", "}", "div", "class", "var(--x)", "price", "0.5",
                     "display:flex;", "<span>", "</span>", "export", "import", "null", "this", "item"]
        var out = [UInt8]()
        while out.count < count {
            out += Array(words[Int.random(in: 0..<words.count, using: &rng)].utf8)
            out.append(Int.random(in: 0..<8, using: &rng) == 0 ? 10 : 32)
        }
        return Array(out.prefix(count))
    }

    /// bsdiff's offtout: 8 bytes little-endian magnitude with the sign in the top bit.
    static func offtout(_ value: Int64) -> [UInt8] {
        let magnitude = value < 0 ? UInt64(bitPattern: 0 &- value) | (1 << 63) : UInt64(value)
        return withUnsafeBytes(of: magnitude.littleEndian) { Array($0) }
    }

    static func header(_ ctrl: Int64, _ diff: Int64, _ newSize: Int64) -> [UInt8] {
        Array("BSDIFF40".utf8) + offtout(ctrl) + offtout(diff) + offtout(newSize)
    }

    static func control(_ triples: [(Int64, Int64, Int64)]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(triples.count * 24)
        for (x, y, z) in triples { out += offtout(x) + offtout(y) + offtout(z) }
        return out
    }

    /// Compresses with the `bzip2` command line tool (what bsdiff's libbz2 writes). Blocks
    /// the caller (the hostile cases build their patches synchronously): a few bytes, a moment.
    static func bzip2(_ data: [UInt8], in dir: TemporaryDirectory) throws -> [UInt8] {
        let path = dir.file("stream-\(UUID().uuidString)")
        try Data(data).write(to: URL(fileURLWithPath: path))
        let result = try runOnThisThread("bzip2", ["-9", "-f", path])  // blocking: a few bytes, a moment
        guard result.status == 0 else { throw OfflineAgentError(.patch, "bzip2 failed: \(result.stderr)") }
        defer { try? FileManager.default.removeItem(atPath: path + ".bz2") }
        return try bytes(path + ".bz2")
    }

    static func bunzip2(_ data: [UInt8], in dir: TemporaryDirectory) throws -> [UInt8] {
        let path = dir.file("stream-\(UUID().uuidString).bz2")
        try Data(data).write(to: URL(fileURLWithPath: path))
        let result = try runOnThisThread("bzip2", ["-d", "-f", path])  // blocking: a few bytes, a moment
        guard result.status == 0 else { throw OfflineAgentError(.patch, "bunzip2 failed: \(result.stderr)") }
        let plain = String(path.dropLast(4))
        defer { try? FileManager.default.removeItem(atPath: plain) }
        return try bytes(plain)
    }

    /// A BSDIFF40 patch made by hand from control triples and stream contents.
    static func patch(_ triples: [(Int64, Int64, Int64)], diff: [UInt8], extra: [UInt8], newSize: Int64,
                      in dir: TemporaryDirectory) throws -> [UInt8] {
        let c = try bzip2(control(triples), in: dir)
        let d = try bzip2(diff, in: dir)
        let e = try bzip2(extra, in: dir)
        return header(Int64(c.count), Int64(d.count), newSize) + c + d + e
    }

    static func bsdiff(_ old: String, _ new: String, _ patch: String) async throws {
        let result = try await run("bsdiff", [old, new, patch])
        guard result.status == 0 else { throw OfflineAgentError(.patch, "bsdiff failed: \(result.stderr)") }
    }

    /// A patch from the reference `bsdiff` on PATH.
    static func referencePatch(_ old: [UInt8], _ new: [UInt8], in dir: TemporaryDirectory) async throws -> [UInt8] {
        let id = UUID().uuidString
        let (o, n, p) = (dir.file("ref-\(id).old"), dir.file("ref-\(id).new"), dir.file("ref-\(id).bsdiff"))
        try Data(old).write(to: URL(fileURLWithPath: o))
        try Data(new).write(to: URL(fileURLWithPath: n))
        try await bsdiff(o, n, p)
        defer { for f in [o, n, p] { try? FileManager.default.removeItem(atPath: f) } }
        return try bytes(p)
    }

    /// Applies `patch` to `old` with Patcher and returns the result.
    static func applied(_ old: [UInt8], _ patch: [UInt8], in dir: TemporaryDirectory) throws -> [UInt8] {
        let id = UUID().uuidString
        let (o, p, n) = (dir.file("apply-\(id).old"), dir.file("apply-\(id).bsdiff"), dir.file("apply-\(id).new"))
        try Data(old).write(to: URL(fileURLWithPath: o))
        try Data(patch).write(to: URL(fileURLWithPath: p))
        defer { for f in [o, p, n] { try? FileManager.default.removeItem(atPath: f) } }
        try Patcher.apply(old: URL(fileURLWithPath: o), patch: URL(fileURLWithPath: p), to: URL(fileURLWithPath: n))
        return try bytes(n)
    }

    /// The control triples of a patch, decoded with the `bzip2` tool.
    static func controlTriples(of patch: [UInt8], in dir: TemporaryDirectory) throws -> [(x: Int64, y: Int64, z: Int64)] {
        func offtin(_ b: ArraySlice<UInt8>) -> Int64 {
            var magnitude: UInt64 = 0
            for byte in b.reversed() { magnitude = magnitude << 8 | UInt64(byte) }
            let value = Int64(magnitude & ~(1 << 63))
            return magnitude >> 63 == 1 ? -value : value
        }
        let ctrlLength = Int(offtin(patch[8..<16]))
        let plain = try bunzip2(Array(patch[32..<32 + ctrlLength]), in: dir)
        return stride(from: 0, to: plain.count - 23, by: 24).map { i in
            let base = plain.startIndex + i
            return (offtin(plain[base..<base + 8]), offtin(plain[base + 8..<base + 16]), offtin(plain[base + 16..<base + 24]))
        }
    }

    /// The status of the PatchFailure a throwing call ends with, or nil if it succeeds.
    static func status(_ body: () throws -> Void) -> Int32? {
        do {
            try body()
            return nil
        } catch let error as OfflineAgentError {
            return (error.underlying as? PatchFailure)?.status
        } catch {
            return nil
        }
    }

    /// Leftover temporary files of the applier (".<name>.cbspatch-XXXXXX").
    static func strayFiles(in path: String) -> [String] {
        tree(path).filter { $0.contains(".cbspatch-") }
    }

    /// The web bundle versions to package: the fixture app when it is there,
    /// otherwise a generated HTML/JS/CSS app with realistic edits between versions.
    static func bundleVersions(in dir: TemporaryDirectory) throws -> [(version: String, root: String)] {
        let fixtures = "\(Repo.fixtures)/sample-app"
        let found = (try? FileManager.default.contentsOfDirectory(atPath: fixtures))?
            .filter { FileSystem.isDirectory("\(fixtures)/\($0)") && Version($0) != nil }
            .sorted { Version($0)! < Version($1)! } ?? []
        if found.count >= 2 { return found.map { ($0, "\(fixtures)/\($0)") } }
        return try (0..<3).map { step in
            let root = dir.file("generated-\(step)")
            var rng = SplitMix64(seed: 77) // same base every version, then per-version edits
            var script = textLike(60_000, &rng)
            var style = textLike(12_000, &rng)
            var edits = SplitMix64(seed: UInt64(100 + step))
            for _ in 0..<(step * 25) {
                let i = Int.random(in: 0..<script.count - 50, using: &edits)
                script.replaceSubrange(i..<i + 5, with: textLike(9, &edits))
            }
            if step > 0 { style += Array(".v\(step) { color: red; }\n".utf8) }
            let html = "<!doctype html><html><head><link rel=stylesheet href=css/app.css></head>"
                + "<body><span id=version>1.\(step).0</span><script src=js/app.js></script></body></html>\n"
            for (name, content) in [("index.html", Array(html.utf8)), ("js/app.js", script), ("css/app.css", style)] {
                let path = "\(root)/\(name)"
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                try Data(content).write(to: URL(fileURLWithPath: path))
            }
            return ("1.\(step).0", root)
        }
    }
}
