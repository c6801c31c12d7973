import COfflineZlib
import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Builds packages the way `docs/PROTOCOL.md` recommends: *stored* entries, names sorted
/// by their UTF-8 bytes, one fixed timestamp and fixed attributes, so identical
/// input gives byte-identical zips and bsdiff patches between versions stay small.
enum PublishZip {
    /// One file of the package: its name inside the zip and where it is on disk.
    struct Entry: Sendable, Equatable {
        var name: String
        var path: String
    }

    /// A non-directory found under the source, before the rules have seen it.
    private struct Found {
        var name: String
        var path: String
        var type: PackageRules.EntryType
        var size: Int64
    }

    /// DOS date of 1980-01-01 (day 1, month 1, year 0), time 00:00:00: the earliest
    /// the format can express, and what `zip -X` users usually pin mtimes to.
    static let dosDate: UInt16 = (1 << 5) | 1
    static let dosTime: UInt16 = 0
    /// `-rw-r--r--` regular file in the high 16 bits (Unix "version made by").
    static let externalAttributes: UInt32 = 0o100644 << 16
    static let versionMadeBy: UInt16 = (3 << 8) | 20
    static let versionNeeded: UInt16 = 10
    /// General purpose flag bit 11: the name is UTF-8.
    static let utf8Flag: UInt16 = 1 << 11

    /// The regular files under `source`, sorted by the bytes of their names.
    ///
    /// The tree is checked with the rules the device's extractor applies
    /// (`PackageRules` under `limits`, the size cap on the total of the file sizes)
    /// before anything is written, so no device refuses what this publishes.
    /// Symlinks and special files are refused rather than followed: a package must
    /// not pick up files from outside its source, and devices refuse links anyway.
    /// - Throws: `OfflineAgentError` (`.publish`) naming the first offending path.
    static func collect(source: String, limits: ExtractionLimits = ExtractionLimits()) throws -> [Entry] {
        var found: [Found] = []
        func walk(_ dir: String, prefix: String) throws {
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: dir)
            } catch {
                throw PublishError(.publish, "cannot list source directory", path: dir)
            }
            for name in names {
                let path = "\(dir)/\(name)"
                let relative = prefix.isEmpty ? name : "\(prefix)/\(name)"
                var st = stat()
                guard lstat(path, &st) == 0 else { throw PublishError(.publish, "cannot read file", path: path, underlying: POSIXFailure("lstat")) }
                let type = PackageRules.EntryType(mode: st.st_mode) ?? .special
                if type == .directory {
                    // Only files become entries; their names carry the directories' rules.
                    try walk(path, prefix: relative)
                } else {
                    found.append(Found(name: relative, path: path, type: type, size: Int64(st.st_size)))
                }
            }
        }
        try walk(source, prefix: "")
        guard !found.isEmpty else { throw PublishError(.publish, "source directory holds no files", path: source) }
        // The zip's order, so the refusal named is the one a device would name first.
        found.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }

        var rules = PackageRules(limits: limits)
        for file in found {
            do {
                try PackageRules.check(type: file.type, of: file.name, isDirectory: false)
                _ = try rules.admit(file.name)
                try rules.add(bytes: file.size)
            } catch {
                let named = error.reason.contains("'\(PackageRules.quoted(file.name))'")
                throw PublishError(
                    .publish, "devices would refuse this package: \(error.reason)\(named ? "" : " (at '\(PackageRules.quoted(file.name))')")",
                    path: file.path)
            }
        }
        return found.map { Entry(name: $0.name, path: $0.path) }
    }

    /// Writes a stored zip of `entries` (already sorted) to a new file at `path`.
    static func write(_ entries: [Entry], to path: String) throws -> PublishedFile {
        guard entries.count < 0xFFFF else {
            throw PublishError(.publish, "too many files for a package (\(entries.count); at most 65534)")
        }
        let out = try PublishFileWriter(creating: path)
        var central: [UInt8] = []
        var offset: UInt64 = 0
        for entry in entries {
            let data: Data
            do {
                // Mapped: large assets are not copied into memory.
                data = try Data(contentsOf: URL(fileURLWithPath: entry.path), options: .alwaysMapped)
            } catch {
                throw PublishError(.publish, "cannot read file", path: entry.path)
            }
            guard data.count < 0xFFFF_FFFF, offset < 0xFFFF_FFFF else {
                throw PublishError(.publish, "package would exceed 4 GiB (zip64 is not written)", path: entry.path)
            }
            let name = Array(entry.name.utf8)
            let flags: UInt16 = name.allSatisfy { $0 < 0x80 } ? 0 : utf8Flag
            let crc = crc32(of: data)
            let size = UInt32(data.count)

            var local: [UInt8] = []
            local.appendLE32(0x0403_4b50)
            local.appendLE16(versionNeeded)
            local.appendLE16(flags)
            local.appendLE16(0) // stored
            local.appendLE16(dosTime)
            local.appendLE16(dosDate)
            local.appendLE32(crc)
            local.appendLE32(size)
            local.appendLE32(size)
            local.appendLE16(UInt16(name.count))
            local.appendLE16(0) // extra field length
            local += name
            try out.write(local)
            try out.write(data)

            central.appendLE32(0x0201_4b50)
            central.appendLE16(versionMadeBy)
            central.appendLE16(versionNeeded)
            central.appendLE16(flags)
            central.appendLE16(0)
            central.appendLE16(dosTime)
            central.appendLE16(dosDate)
            central.appendLE32(crc)
            central.appendLE32(size)
            central.appendLE32(size)
            central.appendLE16(UInt16(name.count))
            central.appendLE16(0) // extra field length
            central.appendLE16(0) // comment length
            central.appendLE16(0) // disk number
            central.appendLE16(0) // internal attributes
            central.appendLE32(externalAttributes)
            central.appendLE32(UInt32(offset))
            central += name

            offset += UInt64(local.count) + UInt64(data.count)
        }
        guard offset + UInt64(central.count) < 0xFFFF_FFFF else {
            throw PublishError(.publish, "package would exceed 4 GiB (zip64 is not written)")
        }
        var end: [UInt8] = []
        end.appendLE32(0x0605_4b50)
        end.appendLE16(0) // this disk
        end.appendLE16(0) // disk with the central directory
        end.appendLE16(UInt16(entries.count))
        end.appendLE16(UInt16(entries.count))
        end.appendLE32(UInt32(central.count))
        end.appendLE32(UInt32(offset))
        end.appendLE16(0) // comment length
        try out.write(central)
        try out.write(end)
        return try out.finish()
    }

    /// CRC-32 (the zip/gzip polynomial) from zlib, fed in chunks its 32-bit length takes.
    static func crc32(of data: Data) -> UInt32 {
        data.withUnsafeBytes { raw -> UInt32 in
            var crc = COfflineZlib.crc32(0, nil, 0)
            var offset = 0
            while offset < raw.count {
                let chunk = min(raw.count - offset, 1 << 30)
                crc = COfflineZlib.crc32(crc, raw.baseAddress!.advanced(by: offset).assumingMemoryBound(to: Bytef.self), uInt(chunk))
                offset += chunk
            }
            return UInt32(truncatingIfNeeded: crc)
        }
    }
}

extension [UInt8] {
    /// Appends little-endian integers, the byte order of every zip field.
    fileprivate mutating func appendLE16(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
    }

    fileprivate mutating func appendLE32(_ value: UInt32) {
        appendLE16(UInt16(truncatingIfNeeded: value))
        appendLE16(UInt16(truncatingIfNeeded: value >> 16))
    }
}
