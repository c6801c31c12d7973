import CLibzip
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Limits that bound what one archive may make the extractor write.
public struct ExtractionLimits: Sendable, Equatable {
    /// The most bytes all entries together may expand to (default 1 GiB).
    public var maxTotalBytes: Int64
    /// The most entries an archive may hold (default 100 000).
    public var maxEntries: Int

    public init(maxTotalBytes: Int64 = 1 << 30, maxEntries: Int = 100_000) {
        self.maxTotalBytes = maxTotalBytes
        self.maxEntries = maxEntries
    }
}

/// What an extraction produced.
public struct ExtractionSummary: Sendable, Equatable {
    public var files: Int
    public var directories: Int
    public var bytes: Int64
}

/// Extracts package archives with libzip, refusing hostile archives whole.
///
/// The archive is checked before anything is written (names, types, methods,
/// declared sizes), then written into a fresh temporary directory beside the
/// destination and renamed into place only when every entry has been read to its
/// end with a good CRC. On any failure nothing is left behind.
public enum ZipExtractor {
    /// One entry that passed the checks.
    struct Entry: Sendable {
        var index: Int64
        var components: [String]
        var isDirectory: Bool
        var size: Int64
        var mode: mode_t
    }

    /// Extracts `archive` into `destination`, which must not exist yet.
    ///
    /// - Parameter durable: flush the extracted files to disk before the final rename
    ///   (what an installer needs; a one-off extraction may skip it).
    /// - Throws: `OfflineAgentError` with code `.extract` naming the first problem found.
    @discardableResult
    public static func extract(
        archive: URL, to destination: URL, limits: ExtractionLimits = ExtractionLimits(), durable: Bool = true
    ) throws -> ExtractionSummary {
        let archivePath = archive.path
        let destinationPath = FileSystem.absolute(destination.path)
        guard !FileSystem.exists(destinationPath) else {
            throw OfflineAgentError(.extract, "destination already exists", path: destinationPath)
        }
        let entries = try plan(archivePath: archivePath, limits: limits)
        let parent = FileSystem.parent(of: destinationPath)
        let staging: String
        do {
            staging = try FileSystem.makeTemporaryDirectory(in: parent, prefix: ".\(FileSystem.name(of: destinationPath)).extract-")
        } catch {
            throw OfflineAgentError(.extract, "cannot create staging directory", path: parent, underlying: error as? POSIXFailure)
        }
        do {
            let summary = try write(entries, from: archivePath, into: staging)
            guard chmod(staging, 0o755) == 0 else { throw POSIXFailure("chmod \(staging)") }
            if durable { try FileSystem.syncFilesystem(containing: staging) }
            guard rename(staging, destinationPath) == 0 else { throw POSIXFailure("rename \(staging)") }
            if durable { try FileSystem.sync(parent) }
            return summary
        } catch let error as OfflineAgentError {
            FileSystem.remove(staging)
            throw error
        } catch {
            FileSystem.remove(staging)
            throw OfflineAgentError(.extract, "cannot write extracted files", path: destinationPath, underlying: error as? POSIXFailure)
        }
    }

    // MARK: - Checking the whole archive before writing

    static func plan(archivePath: String, limits: ExtractionLimits) throws -> [Entry] {
        for name in try ZipCentralDirectory.rawNames(of: archivePath) where name.contains(0) {
            throw refusal("entry name contains NUL", archivePath)
        }
        let archive = try ZipArchive(path: archivePath)
        let count = archive.entryCount
        guard count >= 0 else { throw refusal("cannot count entries", archivePath) }
        guard count <= limits.maxEntries else {
            throw refusal("\(count) entries exceed the limit of \(limits.maxEntries)", archivePath)
        }
        var entries: [Entry] = []
        entries.reserveCapacity(Int(count))
        var seen: Set<String> = []
        var files: Set<String> = []
        var directories: Set<String> = []
        var total: Int64 = 0
        for index in 0..<count {
            let st = try archive.stat(index)
            guard let cName = st.name else { throw refusal("entry \(index) has no name", archivePath) }
            let name = String(cString: cName)
            let (components, isDirectory) = try validate(name: name, archivePath: archivePath)
            let folded = components.joined(separator: "/").lowercased()
            guard seen.insert(folded).inserted else { throw refusal("duplicate entry '\(name)'", archivePath) }

            if st.valid & UInt64(ZIP_STAT_ENCRYPTION_METHOD) != 0, st.encryption_method != UInt16(ZIP_EM_NONE) {
                throw refusal("entry '\(name)' is encrypted", archivePath)
            }
            guard st.valid & UInt64(ZIP_STAT_COMP_METHOD) != 0,
                  zip_compression_method_supported(Int32(st.comp_method), 0) != 0 else {
                throw refusal("entry '\(name)' uses unknown compression method \(st.comp_method)", archivePath)
            }
            guard st.valid & UInt64(ZIP_STAT_SIZE) != 0, st.size <= UInt64(Int64.max) else {
                throw refusal("entry '\(name)' has no valid size", archivePath)
            }
            let size = Int64(st.size)
            let mode = try fileMode(archive: archive, index: index, name: name, isDirectory: isDirectory)
            if isDirectory {
                guard size == 0 else { throw refusal("directory entry '\(name)' has data", archivePath) }
                directories.insert(folded)
            } else {
                files.insert(folded)
                let (sum, overflow) = total.addingReportingOverflow(size)
                guard !overflow, sum <= limits.maxTotalBytes else {
                    throw refusal("entries expand past the limit of \(limits.maxTotalBytes) bytes", archivePath)
                }
                total = sum
            }
            for depth in 1..<max(components.count, 1) {
                directories.insert(components[0..<depth].joined(separator: "/").lowercased())
            }
            entries.append(Entry(index: index, components: components, isDirectory: isDirectory, size: size, mode: mode))
        }
        if let clash = files.intersection(directories).first {
            throw refusal("'\(clash)' is both a file and a directory", archivePath)
        }
        return entries
    }

    /// Splits an entry name into safe components, or throws why it is unsafe.
    static func validate(name: String, archivePath: String) throws -> (components: [String], isDirectory: Bool) {
        guard !name.isEmpty else { throw refusal("empty entry name", archivePath) }
        guard !name.contains("\0") else { throw refusal("entry name contains NUL", archivePath) }
        guard !name.contains("\\") else { throw refusal("entry name '\(name)' contains a backslash", archivePath) }
        guard !name.hasPrefix("/") else { throw refusal("absolute entry name '\(name)'", archivePath) }
        let isDirectory = name.hasSuffix("/")
        let components = (isDirectory ? String(name.dropLast()) : name)
            .split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for component in components {
            if component.isEmpty { throw refusal("entry name '\(name)' has an empty component", archivePath) }
            if component == ".." { throw refusal("entry name '\(name)' contains '..'", archivePath) }
            if component == "." { throw refusal("entry name '\(name)' contains '.'", archivePath) }
        }
        return (components, isDirectory)
    }

    /// The permission bits to create an entry with: only regular files and directories
    /// are accepted, and setuid/setgid/sticky bits are never kept.
    private static func fileMode(archive: ZipArchive, index: Int64, name: String, isDirectory: Bool) throws -> mode_t {
        let (opsys, attributes) = try archive.externalAttributes(index)
        var executable = false
        if opsys == UInt8(ZIP_OPSYS_UNIX) {
            let mode = mode_t(attributes >> 16)
            switch mode & S_IFMT {
            case 0: break
            case S_IFREG:
                guard !isDirectory else { throw refusal("entry '\(name)' is a file named like a directory", archive.path) }
            case S_IFDIR:
                guard isDirectory else { throw refusal("entry '\(name)' is a directory named like a file", archive.path) }
            case S_IFLNK: throw refusal("entry '\(name)' is a symbolic link", archive.path)
            default: throw refusal("entry '\(name)' is a device, fifo or socket", archive.path)
            }
            executable = mode & 0o111 != 0
        }
        return isDirectory || executable ? 0o755 : 0o644
    }

    // MARK: - Writing

    private static func write(_ entries: [Entry], from archivePath: String, into staging: String) throws -> ExtractionSummary {
        let root = open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { throw POSIXFailure("open \(staging)") }
        defer { close(root) }
        // Directories first, in order, so workers only ever create files.
        var made: Set<[String]> = []
        var directoryCount = 0
        for entry in entries {
            let dirs = entry.isDirectory ? entry.components : Array(entry.components.dropLast())
            for depth in stride(from: 1, through: dirs.count, by: 1) where made.insert(Array(dirs[0..<depth])).inserted {
                let parentFD = try openDirectory(root: root, Array(dirs[0..<(depth - 1)]))
                defer { if parentFD != root { close(parentFD) } }
                guard mkdirat(parentFD, dirs[depth - 1], 0o755) == 0 else {
                    throw POSIXFailure("mkdir \(dirs[0..<depth].joined(separator: "/"))")
                }
                directoryCount += 1
            }
        }
        let files = entries.filter { !$0.isDirectory }
        let bytes = files.reduce(Int64(0)) { $0 + $1.size }
        // Two readers (each with its own libzip handle: zip_t is not thread-safe) keep
        // both cores busy inflating; small archives aren't worth a second open.
        let workers = bytes > 4 << 20 && files.count > 1 ? 2 : 1
        let shares = split(files, into: workers)
        let outcome = WorkerOutcome()
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do {
                let archive = try ZipArchive(path: archivePath)
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: 256 << 10, alignment: 16)
                defer { buffer.deallocate() }
                for (number, entry) in shares[worker].enumerated() {
                    if outcome.failed { return }
                    try writeFile(entry, archive: archive, root: root, buffer: buffer, bufferSize: 256 << 10)
                    if number == 1 { CrashPoint.duringExtract.hit() }
                }
            } catch {
                outcome.record(error)
            }
        }
        if let error = outcome.error { throw error }
        return ExtractionSummary(files: files.count, directories: directoryCount, bytes: bytes)
    }

    /// Splits entries into `count` shares of similar byte totals.
    private static func split(_ files: [Entry], into count: Int) -> [[Entry]] {
        guard count > 1 else { return [files] }
        var shares = Array(repeating: [Entry](), count: count)
        var totals = Array(repeating: Int64(0), count: count)
        for entry in files.sorted(by: { $0.size > $1.size }) {
            let target = totals.indices.min { totals[$0] < totals[$1] }!
            shares[target].append(entry)
            totals[target] += entry.size
        }
        return shares
    }

    private static func openDirectory(root: Int32, _ components: [String]) throws -> Int32 {
        var fd = root
        for component in components {
            let next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd != root { close(fd) }
            guard next >= 0 else { throw POSIXFailure("open directory \(components.joined(separator: "/"))") }
            fd = next
        }
        return fd
    }

    private static func writeFile(
        _ entry: Entry, archive: ZipArchive, root: Int32, buffer: UnsafeMutableRawPointer, bufferSize: Int
    ) throws {
        let name = entry.components.joined(separator: "/")
        let dir = try openDirectory(root: root, Array(entry.components.dropLast()))
        defer { if dir != root { close(dir) } }
        let fd = openat(dir, entry.components.last!, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, entry.mode)
        guard fd >= 0 else { throw POSIXFailure("create \(name)") }
        defer { close(fd) }
        let reader = try archive.open(entry.index)
        var written: Int64 = 0
        while true {
            let n: Int
            do { n = try reader.read(into: buffer, count: bufferSize) } catch let error as OfflineAgentError {
                throw refusal("entry '\(name)': \(error.reason)", archive.path)
            }
            if n == 0 { break }
            // Never write past the declared size: a lying header must not fill the disk.
            guard Int64(n) <= entry.size - written else {
                throw refusal("entry '\(name)' holds more bytes than its declared \(entry.size)", archive.path)
            }
            var offset = 0
            while offset < n {
                let w = Glibc.write(fd, buffer + offset, n - offset)
                if w < 0 {
                    if errno == EINTR { continue }
                    throw POSIXFailure("write \(name)")
                }
                offset += w
            }
            written += Int64(n)
        }
        guard written == entry.size else {
            throw refusal("entry '\(name)' holds \(written) bytes, declared \(entry.size)", archive.path)
        }
        do { try reader.close() } catch let error as OfflineAgentError {
            throw refusal("entry '\(name)': \(error.reason)", archive.path)
        }
    }

    private static func refusal(_ reason: String, _ path: String) -> OfflineAgentError {
        OfflineAgentError(.extract, reason, path: path)
    }
}

/// The first error of any extraction worker; later workers stop early.
private final class WorkerOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var first: (any Error)?

    var failed: Bool { lock.withLock { first != nil } }
    var error: (any Error)? { lock.withLock { first } }

    func record(_ error: any Error) {
        lock.withLock { if first == nil { first = error } }
    }
}
