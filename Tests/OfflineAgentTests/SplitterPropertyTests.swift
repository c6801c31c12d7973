import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Properties of `PatchedPackageSplitter` on many seeded packages (valid stored zips
/// of varied shapes, hostile variants, random byte mutations), fed in random chunks as
/// bspatch's writer would: no trap, no leaked descriptor or temporary file, and either
/// a stop, or segments whose skeleton bytes and objects give back the input byte for
/// byte, every object named by the SHA-256 of its bytes, the stream's hash the input's.
@Suite("Splitter properties", .serialized)
struct SplitterPropertyTests {
    /// `SplitMix64` with the draws these tests make: the same seed, the same cases.
    struct Rng {
        private var source: SplitMix64
        init(state: UInt64) { source = SplitMix64(seed: state) }
        mutating func next() -> UInt64 { source.next() }
        mutating func int(_ range: ClosedRange<Int>) -> Int { range.lowerBound + Int(next() % UInt64(range.count)) }
        mutating func chance(_ percent: Int) -> Bool { int(0...99) < percent }
        mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) } }
    }

    static func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff)] }
    static func le32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8(v >> 24)] }

    /// One entry of a hand-built zip: every field may lie.
    struct Entry {
        var name: [UInt8]
        var localName: [UInt8]
        var payload: [UInt8]
        var method = 0
        var flags = 0x0800
        var crc: UInt32
        var compressed: UInt32
        var uncompressed: UInt32
        var localExtra: [UInt8] = []
        var centralExtra: [UInt8] = []
        var junkAfter: [UInt8] = []
        var mode: UInt32 = 0o100644
    }

    static func build(_ entries: [Entry], comment: [UInt8] = []) -> [UInt8] {
        var out: [UInt8] = [], central: [UInt8] = []
        for e in entries {
            let offset = UInt32(out.count)
            out += le32(0x0403_4b50) + le16(20) + le16(e.flags) + le16(e.method) + le16(0) + le16(0x21)
            out += le32(e.crc) + le32(e.compressed) + le32(e.uncompressed)
            out += le16(e.localName.count) + le16(e.localExtra.count) + e.localName + e.localExtra + e.payload + e.junkAfter
            central += le32(0x0201_4b50) + le16(0x031E) + le16(20) + le16(e.flags) + le16(e.method) + le16(0) + le16(0x21)
            central += le32(e.crc) + le32(e.compressed) + le32(e.uncompressed)
            central += le16(e.name.count) + le16(e.centralExtra.count) + le16(0) + le16(0) + le16(0)
            central += le32(e.mode << 16) + le32(offset) + e.name + e.centralExtra
        }
        let cdOffset = UInt32(out.count)
        out += central
        out += le32(0x0605_4b50) + le16(0) + le16(0) + le16(entries.count) + le16(entries.count)
        out += le32(UInt32(central.count)) + le32(cdOffset) + le16(comment.count) + comment
        return out
    }

    static func stored(_ name: [UInt8], _ data: [UInt8]) -> Entry {
        let crc = ZipBuilder.crc32(data)
        return Entry(name: name, localName: name, payload: data, crc: crc, compressed: UInt32(data.count), uncompressed: UInt32(data.count))
    }

    static let oddNames: [[UInt8]] = [
        Array("../escape".utf8), Array("a/../../b".utf8), [0x61, 0x00, 0x62], [0xFF, 0xFE, 0x41], Array("/abs".utf8),
        Array("dir/".utf8), Array("a\\b".utf8), Array(repeating: 0x61, count: 300), Array("é.html".utf8), [],
    ]

    /// A package of a random shape; `big` adds an entry at the 4 MiB in-memory bound ± 1.
    static func shape(_ rng: inout Rng, big: Bool, hostile: Bool = true) -> [UInt8] {
        var entries: [Entry] = []
        let count = rng.int(0...24)
        for i in 0..<count {
            var name = Array("f\(i)-\(rng.int(0...9)).txt".utf8)
            if hostile, rng.chance(10) { name = oddNames[rng.int(0...(oddNames.count - 1))] }
            if hostile, rng.chance(8), let previous = entries.last { name = previous.name } // a duplicate
            let size = rng.chance(20) ? 0 : rng.chance(70) ? rng.int(1...64) : rng.int(65...70_000)
            var entry = stored(name, rng.bytes(size))
            switch hostile ? rng.int(0...19) : rng.int(11...19) {
            case 0: entry.localName = Array("other".utf8)
            case 1: entry.localExtra = le16(0xCAFE) + le16(4) + rng.bytes(4)
            case 2: entry.centralExtra = le16(0x5455) + le16(5) + [1] + rng.bytes(4)
            case 3: entry.compressed &+= 3; entry.uncompressed &+= 3 // local sizes lying: longer
            case 4 where size > 3: entry.compressed -= 3; entry.uncompressed -= 3 // shorter
            case 5: entry.junkAfter = rng.bytes(rng.int(1...40)) // junk between entries
            case 6: entry.compressed = 0xFFFF_FFFF; entry.uncompressed = 0xFFFF_FFFF // zip64 markers
            case 7: entry.flags |= 0x0008 // data descriptor
            case 8:
                // Deflated, mixed in.
                let deflated = ZipBuilder.deflate(entry.payload)
                entry.method = 8; entry.payload = deflated; entry.compressed = UInt32(deflated.count)
            case 9: entry.crc ^= 1 // damaged CRC
            case 10: entry.flags |= 0x0001 // encrypted
            case 11: entry.mode = 0o100755 // executable
            case 12: entry.localExtra = le16(0x0001) + le16(16) + rng.bytes(16) // a zip64 extra with plain sizes
            default: break
            }
            entries.append(entry)
        }
        if big {
            let size = ObjectWriter.wholeCapacity + rng.int(-1...1)
            var data = [UInt8](repeating: 0, count: size)
            for i in stride(from: 0, to: size, by: 4096) { data[i] = UInt8(truncatingIfNeeded: i >> 12) }
            entries.insert(stored(Array("big.bin".utf8), data), at: rng.int(0...entries.count))
        }
        let comment = hostile && rng.chance(15) ? rng.bytes(rng.int(0...300)) : []
        return build(entries, comment: comment)
    }

    /// Random byte-level damage: flips, truncation, insertion, deletion, duplication.
    static func mutate(_ input: [UInt8], _ rng: inout Rng) -> [UInt8] {
        var bytes = input
        for _ in 0..<rng.int(1...4) where !bytes.isEmpty {
            let at = rng.int(0...(bytes.count - 1))
            switch rng.int(0...5) {
            case 0: bytes[at] ^= UInt8(truncatingIfNeeded: rng.int(1...255))
            case 1: bytes.removeSubrange(at...)
            case 2: bytes.insert(contentsOf: rng.bytes(rng.int(1...64)), at: at)
            case 3: bytes.removeSubrange(at..<min(bytes.count, at + rng.int(1...64)))
            case 4: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + rng.int(1...200))], at: rng.int(0...bytes.count))
            default:
                // A header field set to an extreme.
                let extreme: [UInt8] = [[0xFF, 0xFF, 0xFF, 0xFF], [0, 0, 0, 0], [0xFF, 0xFF, 0, 0]][rng.int(0...2)]
                for (i, b) in extreme.enumerated() where at + i < bytes.count { bytes[at + i] = b }
            }
        }
        return bytes
    }

    /// Descriptors this process has open into `directory`.
    static func descriptors(into directory: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) ?? "").hasPrefix(directory) }.count
    }

    /// Feeds `input` in random chunks and checks the properties; returns whether the stream was kept.
    @discardableResult
    static func check(_ input: [UInt8], objects: ObjectStore, candidates: [String: (object: String, crc: UInt32)] = [:],
                      rng: inout Rng, label: String, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let before = descriptors(into: objects.directory)
        var kept = false
        do {
            // Half the time with the stream's length known, as the patch header gives it.
            let splitter = PatchedPackageSplitter(objects: objects, reserve: nil, candidates: candidates,
                                                  packageSize: rng.chance(50) ? Int64(input.count) : nil)
            var offset = 0
            let oneByte = input.count < 4096 && rng.chance(10)
            input.withUnsafeBytes { all in
                while offset < all.count {
                    let length = oneByte ? 1 : min(all.count - offset, rng.chance(50) ? rng.int(1...97) : rng.int(1...(256 << 10)))
                    guard splitter.feed(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + length)])) else { break }
                    offset += length
                }
            }
            #expect(splitter.skeletonBytes.count <= PatchedPackageSplitter.maxSkeletonBytes, "\(label)", sourceLocation: sourceLocation)
            if splitter.endedCleanly {
                kept = true
                splitter.finish()
                #expect(splitter.size == Int64(input.count), "\(label): size", sourceLocation: sourceLocation)
                #expect(splitter.sha256() == PackageFixture.sha256(input), "\(label): hash", sourceLocation: sourceLocation)
                var rebuilt: [UInt8] = []
                rebuilt.reserveCapacity(input.count)
                var skeletonCursor = 0
                for segment in splitter.segments {
                    #expect(segment.start == Int64(rebuilt.count), "\(label): gap or overlap at \(rebuilt.count)", sourceLocation: sourceLocation)
                    if let object = segment.object {
                        let bytes = [UInt8](FileManager.default.contents(atPath: "\(objects.directory)/\(object.name)") ?? Data())
                        #expect(Int64(bytes.count) == segment.length, "\(label): object \(object.name) is \(bytes.count) bytes, segment \(segment.length)", sourceLocation: sourceLocation)
                        #expect(PackageFixture.sha256(bytes) == object.name, "\(label): object \(object.name) does not hold its hash's bytes", sourceLocation: sourceLocation)
                        #expect(splitter.objectsByOffset[object.headerOffset]?.name == object.name, "\(label): offset map", sourceLocation: sourceLocation)
                        rebuilt += bytes
                    } else {
                        let end = skeletonCursor + Int(segment.length)
                        guard end <= splitter.skeletonBytes.count else {
                            Issue.record("\(label): skeleton segments exceed the skeleton bytes", sourceLocation: sourceLocation)
                            break
                        }
                        rebuilt += splitter.skeletonBytes[skeletonCursor..<end]
                        skeletonCursor = end
                    }
                }
                #expect(skeletonCursor == splitter.skeletonBytes.count, "\(label): skeleton bytes left over", sourceLocation: sourceLocation)
                #expect(rebuilt == input, "\(label): skeleton + objects differ from the input (\(rebuilt.count) vs \(input.count) bytes)", sourceLocation: sourceLocation)
            }
        }
        // The splitter is gone: its descriptors closed, its temporary files removed.
        #expect(descriptors(into: objects.directory) == before, "\(label): descriptor leak", sourceLocation: sourceLocation)
        let temps = ((try? FileManager.default.contentsOfDirectory(atPath: objects.directory)) ?? []).filter { $0.hasPrefix(".tmp") }
        #expect(temps.isEmpty, "\(label): temporary files left: \(temps)", sourceLocation: sourceLocation)
        return kept
    }

    /// The installed package's side of a namesake: each stored local header of `input`
    /// (walked in order, as far as they parse) whose object is in the store, by name.
    static func candidates(of input: [UInt8], objects: ObjectStore) -> [String: (object: String, crc: UInt32)] {
        var out: [String: (object: String, crc: UInt32)] = [:]
        var at = 0
        while at + 30 <= input.count, input.le32(at) == 0x0403_4b50 {
            let size = Int(input.le32(at + 22)), n = Int(input.le16(at + 26)), e = Int(input.le16(at + 28))
            let start = at + 30 + n + e
            guard input.le16(at + 8) == 0, size != 0xFFFF_FFFF, start + size <= input.count else { break }
            let object = PackageFixture.sha256(Array(input[start..<(start + size)]))
            if size > 0, FileManager.default.fileExists(atPath: "\(objects.directory)/\(object)") {
                out[String(decoding: input[(at + 30)..<(at + 30 + n)], as: UTF8.self)] = (object, input.le32(at + 14))
            }
            at = start + size
        }
        return out
    }

    @Test("seeded shapes and their mutations: a stop, or skeleton + objects give back the input byte for byte")
    func seeded() throws {
        let root = TemporaryDirectory("split-prop")
        let objects = try ObjectStore(root: root.path)
        var kept = 0, stopped = 0, namesakes = 0
        for seed in UInt64(1)...400 {
            var rng = Rng(state: seed)
            let input = Self.shape(&rng, big: seed % 97 == 0)
            if Self.check(input, objects: objects, rng: &rng, label: "seed \(seed)") { kept += 1 } else { stopped += 1 }
            // Half the mutations meet the unmutated entries as namesakes (same name and CRC-32,
            // bytes changed by the mutation): the compare paths, small and large.
            let candidates = Self.candidates(of: input, objects: objects)
            for round in 0..<6 {
                let mutated = Self.mutate(input, &rng)
                let with = round % 2 == 0 ? candidates : [:]
                namesakes += with.count
                if Self.check(mutated, objects: objects, candidates: with, rng: &rng, label: "seed \(seed) mutation \(round)") { kept += 1 } else { stopped += 1 }
            }
        }
        #expect(namesakes > 1000, "namesakes offered: \(namesakes)")
        // Both outcomes must be exercised, or the generator proves nothing.
        #expect(kept > 100 && stopped > 100, "kept \(kept), stopped \(stopped)")
    }

    /// The four bytes that, appended to bytes whose CRC-32 is `prefix`, make it `target`.
    static func forge(prefix: UInt32, target: UInt32) -> [UInt8] {
        var table = [UInt32](repeating: 0, count: 256), top = [Int](repeating: 0, count: 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            table[i] = c
            top[Int(c >> 24)] = i
        }
        var register = ~target
        for _ in 0..<4 {
            let k = top[Int(register >> 24)]
            register = ((register ^ table[k]) << 8) | UInt32(k)
        }
        return le32(register ^ ~prefix)
    }

    @Test("a namesake with the same name, size and CRC-32 but other bytes is never taken for the new entry (small and large)")
    func forgedNamesake() throws {
        let root = TemporaryDirectory("split-namesake")
        let objects = try ObjectStore(root: root.path)
        var rng = Rng(state: 7)
        for size in [64, ObjectWriter.wholeCapacity + 10] {
            let old = rng.bytes(size)
            var new = old
            // Differs from the old bytes early (a large entry's streamed compare) and is
            // forged at its end to the old CRC-32.
            new[size / 3] ^= 0x5A
            new.replaceSubrange((size - 4)..<size, with: Self.forge(prefix: ZipBuilder.crc32(Array(new[0..<(size - 4)])), target: ZipBuilder.crc32(old)))
            #expect(ZipBuilder.crc32(new) == ZipBuilder.crc32(old), "forged CRC")
            #expect(new != old)
            // The installed package's object for the old bytes.
            let oldName = PackageFixture.sha256(old)
            let path = "\(objects.directory)/\(oldName)"
            try Data(old).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o444)
            let candidates = ["app.js": (object: oldName, crc: ZipBuilder.crc32(old))]
            let input = Self.build([Self.stored(Array("app.js".utf8), new), Self.stored(Array("same.js".utf8), old)])
            #expect(Self.check(input, objects: objects, candidates: candidates, rng: &rng, label: "size \(size)"))
            // Equal bytes under the name are the namesake's object, unwritten.
            let equal = Self.build([Self.stored(Array("app.js".utf8), old)])
            #expect(Self.check(equal, objects: objects, candidates: candidates, rng: &rng, label: "equal \(size)"))
        }
    }
}
