import Foundation
import Testing
import TestSupport

/// The device binary must not load Foundation (CoreFoundation + ICU, ~30 MB of data in
/// a static build): its targets use FoundationEssentials, and no dependency may pull
/// the full module back in (Hummingbird's default traits did). The test build links the
/// Swift libraries dynamically, so the ELF's DT_NEEDED entries name every Swift library
/// a static build would embed.
@Suite struct DeviceBinaryTests {
    /// DT_NEEDED of a little-endian ELF64 file, read from its program headers.
    static func neededLibraries(_ path: String) throws -> [String] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        func u16(_ at: Int) -> Int { Int(data[at]) | Int(data[at + 1]) << 8 }
        func u64(_ at: Int) -> Int { (0..<8).reduce(0) { $0 | Int(data[at + $1]) << (8 * $1) } }
        func u32(_ at: Int) -> Int { (0..<4).reduce(0) { $0 | Int(data[at + $1]) << (8 * $1) } }
        try #require(data.count > 64 && data.prefix(4) == Data([0x7F, 0x45, 0x4C, 0x46]) && data[4] == 2, "not ELF64: \(path)")
        let phoff = u64(0x20), phentsize = u16(0x36), phnum = u16(0x38)
        var loads: [(vaddr: Int, offset: Int, size: Int)] = []
        var dynamic: (offset: Int, size: Int)?
        for i in 0..<phnum {
            let header = phoff + i * phentsize
            switch u32(header) {
            case 1: loads.append((u64(header + 0x10), u64(header + 0x08), u64(header + 0x20)))
            case 2: dynamic = (u64(header + 0x08), u64(header + 0x20))
            default: break
            }
        }
        let table = try #require(dynamic, "no dynamic section: \(path)")
        var needed: [Int] = [], strtab = 0
        for entry in stride(from: table.offset, to: table.offset + table.size, by: 16) {
            switch u64(entry) {
            case 0: break
            case 1: needed.append(u64(entry + 8))
            case 5: strtab = u64(entry + 8)
            default: continue
            }
        }
        let load = try #require(loads.first { strtab >= $0.vaddr && strtab < $0.vaddr + $0.size })
        let base = strtab - load.vaddr + load.offset
        return needed.map { name in
            let start = base + name
            let end = data[start...].firstIndex(of: 0) ?? start
            return String(decoding: data[start..<end], as: UTF8.self)
        }
    }

    @Test func offlineAgentLinksNoFoundationOrICU() throws {
        let needed = try Self.neededLibraries(CLI.binary)
        guard needed.contains(where: { $0.hasPrefix("libswiftCore") }) else {
            // A static build (OFFLINE_AGENT_BIN pointing at a release binary): no ICU data in it.
            let bytes = try Data(contentsOf: URL(fileURLWithPath: CLI.binary), options: .alwaysMapped)
            #expect(bytes.range(of: Data("icudt".utf8)) == nil, "\(CLI.binary) holds ICU data")
            return
        }
        #expect(needed.contains { $0.hasPrefix("libFoundationEssentials") }, "\(needed)")
        for library in needed {
            #expect(!library.hasPrefix("libFoundation.") && !library.contains("ICU") && !library.hasPrefix("libicu")
                && !library.hasPrefix("libFoundationInternationalization") && !library.hasPrefix("libFoundationNetworking"),
                "offline-agent needs \(library)")
        }
    }

    /// libzip, and with it the `libcrypto.so.3` Debian's libzip needs, is loaded when an
    /// archive is opened, not by every process (`Sources/COfflineLibzip/include/clibzip.h`);
    /// the extraction tests prove the loading works.
    @Test func offlineAgentDoesNotLinkLibzip() throws {
        let needed = try Self.neededLibraries(CLI.binary)
        #expect(!needed.contains { $0.hasPrefix("libzip") || $0.hasPrefix("libcrypto") }, "\(needed)")
    }

    /// The publisher may keep Foundation: this proves the check sees it when it is there.
    @Test func theCheckSeesFoundationInThePublisher() throws {
        let needed = try Self.neededLibraries(CLI.publisher)
        #expect(needed.contains { $0.hasPrefix("libFoundation.") }, "\(needed)")
    }
}
