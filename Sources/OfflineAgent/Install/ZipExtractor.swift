import COfflineLibzip
import Dispatch
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Extracts package archives with libzip, refusing hostile archives whole.
///
/// The archive is checked before anything is written (names and their limits,
/// clashes, types, methods, declared sizes), then written into a fresh temporary
/// directory beside the destination and renamed into place only when every entry has
/// been read to its end with a good CRC. On any failure nothing is left behind.
/// Directories are created and opened through descriptors one component at a time
/// (`mkdirat`/`openat` with `O_NOFOLLOW`), in tree order, so the work is linear in the
/// total bytes of the names.
public enum ZipExtractor {
    /// One entry that passed the checks.
    struct Entry: Sendable {
        var index: Int64
        /// The entry's node in the tree; for a file, `directory` is its parent's.
        var node: Int
        var directory: Int
        var isDirectory: Bool
        var size: Int64
        var mode: mode_t
    }

    /// Extracts `archive` into `destination`, which must not exist yet.
    ///
    /// - Parameters:
    ///   - archive: the zip file.
    ///   - destination: the directory to create.
    ///   - limits: what the archive may make the extractor write; every entry is checked first.
    ///   - durable: flush the extracted files to disk before the final rename
    ///     (what an installer needs; a one-off extraction may skip it).
    /// - Throws: `OfflineAgentError` with code `.extract` naming the first problem found;
    ///   its cause is `.hostileArchive` for what no package may do, `.archiveCorrupt` for
    ///   damage, `.diskFull` or `.io` when writing fails.
    @discardableResult
    public static func extract(
        archive: URL, to destination: URL, limits: ExtractionLimits = ExtractionLimits(), durable: Bool = true
    ) throws -> ExtractionSummary {
        try extract(archive: archive, to: destination, limits: limits, durable: durable, objects: nil)
    }

    /// Extracts as above; with `objects`, the tree is made of hard links to the store's
    /// objects (only missing objects are written), its files are read-only (0444, 0555
    /// when executable) and its directories 0555, so no writer through one version can
    /// change another that shares an inode.
    static func extract(
        archive: URL, to destination: URL, limits: ExtractionLimits, durable: Bool, objects: ObjectStore?
    ) throws -> ExtractionSummary {
        let archivePath = archive.path
        let destinationPath = FileSystem.absolute(destination.path)
        guard !FileSystem.exists(destinationPath) else {
            throw OfflineAgentError(.extract, "destination already exists", cause: .io, path: destinationPath)
        }
        let (entries, tree) = try plan(archivePath: archivePath, limits: limits)
        return try makeTree(entries, tree: tree, source: .archive(archivePath), destination: destinationPath, durable: durable, objects: objects)
    }

    /// Where the bytes of a tree's files come from.
    enum EntrySource {
        /// Read from the zip at this path (libzip).
        case archive(String)
        /// Already objects of the store: a streamed patch's output, by archive index.
        case objects([Int64: String])
    }

    /// Makes a version tree for a package that exists only as `view` (its new skeleton)
    /// and the objects a streamed patch wrote (`objectsByOffset`: object, CRC-32 and size
    /// by local header offset). The whole central directory goes through the same checks
    /// as a file's (`plan`, libzip's consistency checks included) before any tree exists,
    /// then the same tree builder links the objects. `path` names the package in messages.
    static func makeTree(
        view: PackageView, objectsByOffset: [UInt64: StreamedObject], path: String, to destination: String,
        limits: ExtractionLimits, objects: ObjectStore
    ) throws -> (summary: ExtractionSummary, namesByOffset: [UInt64: String]) {
        let destinationPath = FileSystem.absolute(destination)
        guard !FileSystem.exists(destinationPath) else {
            throw OfflineAgentError(.extract, "destination already exists", cause: .io, path: destinationPath)
        }
        let directory = try view.centralDirectory(path: path)
        let archive = try ZipArchive(view: view, path: path)
        let (entries, tree) = try plan(archive: archive, rawNames: directory.map(\.name), limits: limits)
        var names: [Int64: String] = [:]
        guard directory.count == entries.count else {
            throw OfflineAgentError(.extract, "libzip sees \(entries.count) entries, the central directory \(directory.count)", cause: .hostileArchive, path: path)
        }
        for entry in entries where !entry.isDirectory {
            // libzip's index is the central directory's order. The offset comes from this
            // reader, the CRC-32 and size from libzip: the object must be what the stream saw
            // at that offset for exactly this entry, or the two readers disagree on the
            // package (a second central directory, a zip64 trick) and it is refused.
            let st = try archive.stat(entry.index)
            let central = directory[Int(entry.index)]
            guard central.localHeaderOffset != 0xFFFF_FFFF, let object = objectsByOffset[UInt64(central.localHeaderOffset)],
                  st.valid & UInt64(ZIP_STAT_CRC) != 0, object.crc32 == st.crc, object.size == entry.size,
                  central.crc32 == st.crc else {
                throw OfflineAgentError(.extract, "entry \(entry.index)'s data is not where the package's local headers put it", cause: .hostileArchive, path: path)
            }
            names[entry.index] = object.name
        }
        // Not flushed here: the install flushes once, before its swap (`Store.install`).
        let summary = try makeTree(entries, tree: tree, source: .objects(names), destination: destinationPath, durable: false, objects: objects)
        // The names the tree links (`.x` for executables): what the kept skeleton must name.
        var namesByOffset: [UInt64: String] = [:]
        for (index, name) in summary.objectNames { namesByOffset[UInt64(directory[Int(index)].localHeaderOffset)] = name }
        return (summary, namesByOffset)
    }

    /// Writes the checked entries into a staging directory beside `destinationPath`,
    /// seals and flushes it, and renames it into place; nothing is left on failure.
    private static func makeTree(
        _ entries: [Entry], tree: EntryTree, source: EntrySource, destination destinationPath: String, durable: Bool, objects: ObjectStore?
    ) throws -> ExtractionSummary {
        let parent = FileSystem.parent(of: destinationPath)
        let staging: String
        do {
            staging = try FileSystem.makeTemporaryDirectory(in: parent, prefix: ".\(FileSystem.name(of: destinationPath)).extract-")
        } catch {
            let failure = error as? POSIXFailure
            throw OfflineAgentError(.extract, "cannot create staging directory", cause: writeCause(failure), path: parent, underlying: failure)
        }
        do {
            let summary = try write(entries, tree: tree, from: source, into: staging, objects: objects)
            guard chmod(staging, objects == nil ? 0o755 : 0o555) == 0 else { throw POSIXFailure("chmod \(staging)") }
            if durable { try FileSystem.syncFilesystem(containing: staging) }
            try CrashPoint.beforeTreeRename.reached()
            guard rename(staging, destinationPath) == 0 else { throw POSIXFailure("rename \(staging)") }
            if durable { try FileSystem.sync(parent) }
            return summary
        } catch let error as OfflineAgentError {
            FileSystem.remove(staging)
            throw error
        } catch {
            FileSystem.remove(staging)
            let failure = error as? POSIXFailure
            let reason = writeCause(failure) == .diskFull ? "disk full writing extracted files" : "cannot write extracted files"
            throw OfflineAgentError(.extract, reason, cause: writeCause(failure), path: destinationPath, underlying: failure)
        }
    }

    /// `.diskFull` for ENOSPC/EDQUOT, `.io` for any other local failure.
    static func writeCause(_ failure: POSIXFailure?) -> OfflineAgentError.Cause {
        failure?.errno == ENOSPC || failure?.errno == EDQUOT ? .diskFull : .io
    }

    // MARK: - Checking the whole archive before writing

    static func plan(archivePath: String, limits: ExtractionLimits) throws -> (entries: [Entry], tree: EntryTree) {
        let rawNames = try ZipCentralDirectory.rawNames(of: archivePath)
        // Before libzip opens it: a NUL in a name is refused as such, whatever else is wrong.
        for name in rawNames where name.contains(0) {
            throw hostile("entry name contains NUL", archivePath)
        }
        return try plan(archive: try ZipArchive(path: archivePath), rawNames: rawNames, limits: limits)
    }

    /// The checks of `plan(archivePath:limits:)` on an open archive and its central
    /// directory's raw names (what libzip hides: a NUL inside a name).
    static func plan(archive: ZipArchive, rawNames: [[UInt8]], limits: ExtractionLimits) throws -> (entries: [Entry], tree: EntryTree) {
        let archivePath = archive.path
        for name in rawNames where name.contains(0) {
            throw hostile("entry name contains NUL", archivePath)
        }
        let count = archive.entryCount
        guard count >= 0 else { throw corrupt("cannot count entries", archivePath) }
        var rules = PackageRules(limits: limits)
        do {
            try rules.check(entryCount: Int(clamping: count))
        } catch {
            throw hostile(error.reason, archivePath)
        }
        var entries: [Entry] = []
        entries.reserveCapacity(Int(count))
        for index in 0..<count {
            let st = try archive.stat(index)
            guard let cName = st.name else { throw corrupt("entry \(index) has no name", archivePath) }
            let name = String(cString: cName)
            let node: Int, isDirectory: Bool
            do {
                (node, isDirectory) = try rules.admit(name)
            } catch {
                throw hostile(error.reason, archivePath)
            }

            if st.valid & UInt64(ZIP_STAT_ENCRYPTION_METHOD) != 0, st.encryption_method != UInt16(ZIP_EM_NONE) {
                throw hostile("entry '\(quoted(name))' is encrypted", archivePath)
            }
            guard st.valid & UInt64(ZIP_STAT_COMP_METHOD) != 0,
                  archive.canDecompress(method: st.comp_method) else {
                throw hostile("entry '\(quoted(name))' uses unknown compression method \(st.comp_method)", archivePath)
            }
            guard st.valid & UInt64(ZIP_STAT_SIZE) != 0, st.size <= UInt64(Int64.max) else {
                throw corrupt("entry '\(quoted(name))' has no valid size", archivePath)
            }
            let size = Int64(st.size)
            let mode = try fileMode(archive: archive, index: index, name: name, isDirectory: isDirectory)
            if isDirectory {
                guard size == 0 else { throw hostile("directory entry '\(quoted(name))' has data", archivePath) }
            } else {
                do { try rules.add(bytes: size) } catch { throw hostile(error.reason, archivePath) }
            }
            entries.append(Entry(index: index, node: node, directory: isDirectory ? node : rules.tree.nodes[node].parent,
                                 isDirectory: isDirectory, size: size, mode: mode))
        }
        return (entries, rules.tree)
    }

    /// A name short enough for a one-line reason: long ones keep their start and end.
    static func quoted(_ name: String) -> String { PackageRules.quoted(name) }

    /// The permission bits to create an entry with: only regular files and directories
    /// are accepted (the package rules), and setuid/setgid/sticky bits are never kept.
    private static func fileMode(archive: ZipArchive, index: Int64, name: String, isDirectory: Bool) throws -> mode_t {
        let (opsys, attributes) = try archive.externalAttributes(index)
        var executable = false
        if opsys == UInt8(ZIP_OPSYS_UNIX) {
            let mode = mode_t(attributes >> 16)
            if let type = PackageRules.EntryType(mode: mode) {
                do {
                    try PackageRules.check(type: type, of: name, isDirectory: isDirectory)
                } catch {
                    throw hostile(error.reason, archive.path)
                }
            }
            executable = mode & 0o111 != 0
        }
        return isDirectory || executable ? 0o755 : 0o644
    }

    // MARK: - Writing

    private static func write(
        _ entries: [Entry], tree: EntryTree, from source: EntrySource, into staging: String, objects: ObjectStore?
    ) throws -> ExtractionSummary {
        let root = open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { throw POSIXFailure("open \(staging)") }
        defer { close(root) }
        // Directories first, in preorder, so workers only ever create files.
        let (order, rank) = tree.preorder()
        var directoryCount = 0
        do {
            let cursor = DirectoryCursor(tree: tree, rootFD: root)
            for node in order where node != EntryTree.root && tree.isDirectory(node) {
                let parentFD = try cursor.move(to: tree.nodes[node].parent)
                guard mkdirat(parentFD, tree.nodes[node].name, 0o755) == 0 else {
                    throw POSIXFailure("mkdir \(tree.path(of: node))")
                }
                directoryCount += 1
            }
        }
        let files = entries.filter { !$0.isDirectory }
        let bytes = files.reduce(Int64(0)) { $0 + $1.size }
        // Two readers (each with its own libzip handle: zip_t is not thread-safe) keep
        // both cores busy inflating; small archives aren't worth a second open.
        let workers: Int
        switch source {
        case .archive: workers = bytes > 4 << 20 && files.count > 1 ? 2 : 1
        // Links only: a second worker's cursor would cost more than it saves.
        case .objects: workers = 1
        }
        // Each share in tree order, so its cursor opens each directory about once.
        let shares = split(files, into: workers).map { share in share.sorted { rank[$0.directory] < rank[$1.directory] } }
        let outcome = WorkerOutcome()
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do {
                let archive: ZipArchive?
                switch source {
                // `plan` opened this file with libzip's consistency checks; each worker's own handle needs them no more.
                case .archive(let path): archive = try ZipArchive(path: path, checked: false)
                case .objects: archive = nil
                }
                let cursor = DirectoryCursor(tree: tree, rootFD: root)
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: 256 << 10, alignment: 16)
                defer { buffer.deallocate() }
                let writer = objects.map(ObjectWriter.init)
                defer { if let writer { outcome.count(written: writer.written, linked: writer.linked, names: writer.names) } }
                for (number, entry) in shares[worker].enumerated() {
                    if outcome.failed { return }
                    let dir = try cursor.move(to: entry.directory)
                    if let writer, case .objects(let names) = source, let object = names[entry.index] {
                        try writer.link(entry, object: object, name: tree.nodes[entry.node].name, path: tree.path(of: entry.node), in: dir)
                    } else if let writer, let archive {
                        try writer.put(entry, name: tree.nodes[entry.node].name, path: tree.path(of: entry.node), archive: archive, in: dir)
                    } else if let archive {
                        try writeFile(entry, tree: tree, archive: archive, in: dir, buffer: buffer, bufferSize: 256 << 10)
                        outcome.count(written: entry.size, linked: 0, names: [:])
                    } else {
                        throw OfflineAgentError(.extract, "entry '\(quoted(tree.path(of: entry.node)))' has no bytes", cause: .unexpected)
                    }
                    if number == 1 { try CrashPoint.duringExtract.reached() }
                }
            } catch {
                outcome.record(error)
            }
        }
        if let error = outcome.error { throw error }
        if objects != nil { try sealDirectories(order: order, tree: tree, root: root) }
        let (written, linked, names) = outcome.counts
        return ExtractionSummary(
            files: files.count, directories: directoryCount, bytes: bytes, written: written, linked: linked, objectNames: names)
    }

    /// Makes every directory under the staging root read-only (0555) once all files are
    /// in: a version's files then cannot be added, removed or renamed by a mere writer.
    private static func sealDirectories(order: [Int], tree: EntryTree, root: Int32) throws {
        let cursor = DirectoryCursor(tree: tree, rootFD: root)
        for node in order where node != EntryTree.root && tree.isDirectory(node) {
            let parentFD = try cursor.move(to: tree.nodes[node].parent)
            guard fchmodat(parentFD, tree.nodes[node].name, 0o555, 0) == 0 else {
                throw POSIXFailure("chmod \(tree.path(of: node))")
            }
        }
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

    private static func writeFile(
        _ entry: Entry, tree: EntryTree, archive: ZipArchive, in dir: Int32, buffer: UnsafeMutableRawPointer, bufferSize: Int
    ) throws {
        let path = tree.path(of: entry.node)
        let fd = openat(dir, tree.nodes[entry.node].name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, entry.mode)
        guard fd >= 0 else { throw POSIXFailure("create \(path)") }
        defer { close(fd) }
        try stream(entry, path: path, archive: archive, buffer: buffer, bufferSize: bufferSize) { bytes in
            do throws(POSIXFailure) { try FileDescriptor.writeAll(fd, bytes) } catch {
                throw POSIXFailure("write \(path)", errno: error.errno)
            }
        }
    }

    /// Reads `entry` to its end through `buffer`, handing each chunk to `body`: never past
    /// its declared size, refusing a short entry, and checking the CRC at the close.
    /// - Parameter whole: read the entry into `buffer` back to back, each chunk after the
    ///   last, instead of each into its start: `buffer` then holds the entry (the caller
    ///   checked that `bufferSize` holds its declared size; one byte more is asked for, so
    ///   an entry longer than declared is still seen).
    static func stream(
        _ entry: Entry, path: String, archive: ZipArchive, buffer: UnsafeMutableRawPointer, bufferSize: Int, whole: Bool = false,
        _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let reader = try archive.open(entry.index)
        var written: Int64 = 0
        // Bounded: every pass consumes at least one byte of the declared size, or ends.
        while true {
            let n: Int
            let start = whole ? buffer.advanced(by: Int(written)) : buffer
            let room = whole ? bufferSize - Int(written) : bufferSize
            do { n = try reader.read(into: start, count: room) } catch let error as OfflineAgentError {
                throw corrupt("entry '\(quoted(path))': \(error.reason)", archive.path)
            }
            if n == 0 { break }
            // Never go past the declared size: a lying header must not fill the disk.
            guard Int64(n) <= entry.size - written else {
                throw hostile("entry '\(quoted(path))' holds more bytes than its declared \(entry.size)", archive.path)
            }
            try body(UnsafeRawBufferPointer(start: start, count: n))
            written += Int64(n)
        }
        guard written == entry.size else {
            throw corrupt("entry '\(quoted(path))' holds \(written) bytes, declared \(entry.size)", archive.path)
        }
        do { try reader.close() } catch let error as OfflineAgentError {
            throw corrupt("entry '\(quoted(path))': \(error.reason)", archive.path)
        }
    }

    /// A refusal of something no package may do.
    private static func hostile(_ reason: String, _ path: String) -> OfflineAgentError {
        OfflineAgentError(.extract, reason, cause: .hostileArchive, path: path)
    }

    /// A refusal of a damaged archive.
    private static func corrupt(_ reason: String, _ path: String) -> OfflineAgentError {
        OfflineAgentError(.extract, reason, cause: .archiveCorrupt, path: path)
    }
}

/// The first error of any extraction worker; later workers stop early.
private final class WorkerOutcome: Sendable {
    private let first = Mutex<(any Error)?>(nil)
    private let totals = Mutex<(written: Int64, linked: Int, names: [Int64: String])>((0, 0, [:]))

    var counts: (written: Int64, linked: Int, names: [Int64: String]) { totals.withLock { $0 } }

    func count(written: Int64, linked: Int, names: [Int64: String]) {
        totals.withLock { $0 = ($0.written + written, $0.linked + linked, $0.names.merging(names) { first, _ in first }) }
    }

    var failed: Bool { first.withLock { $0 != nil } }
    var error: (any Error)? { first.withLock { $0 } }

    func record(_ error: any Error) {
        first.withLock { if $0 == nil { $0 = error } }
    }
}
