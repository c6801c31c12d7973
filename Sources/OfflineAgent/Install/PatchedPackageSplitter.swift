import COfflineZlib
import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Takes a patched package as bspatch makes it (`Patcher.apply(view:patch:into:)`) and
/// splits it as it streams out: each stored entry's bytes become an object of the store
/// (written only when the store lacks it), everything else (local headers, central
/// directory, end record) becomes the new skeleton. The whole stream is hashed for
/// `packageSha256`; nothing is trusted before that hash is checked, and the objects
/// written meanwhile have no name in any version (garbage for GC if the check fails).
///
/// Anything but a plain stored zip (`ZipCentralDirectory.notPlainStored`: a deflated or
/// encrypted entry, a data descriptor, zip64 sizes; or an unknown record, a skeleton over `maxSkeletonBytes`) stops the
/// stream with `stop = .notPlain`: the caller then takes the file path (the whole
/// patched zip, then extraction). Memory is bounded: the 4 MiB entry buffer
/// (`ObjectWriter.wholeCapacity`), a chunk buffer, and the skeleton bytes.
///
/// `@unchecked Sendable`: one thread at a time uses it, handed over by the blocking
/// pool's awaits (the patch's applying thread feeds it, then the install reads it).
final class PatchedPackageSplitter: @unchecked Sendable {
    enum Stop: @unchecked Sendable {
        /// Not a plain stored zip: take the file path instead.
        case notPlain(String)
        /// A local failure (disk full, I/O): the update fails with it.
        case failure(any Error)
    }

    /// One piece of the package: skeleton bytes, or an entry's object.
    struct Segment {
        var start: Int64
        var length: Int64
        /// The entry's object (plain name) and its local header's offset.
        var object: (name: String, headerOffset: UInt64)?
    }

    /// A skeleton beyond this is not a web package worth splitting (typical: under 1 MB).
    static let maxSkeletonBytes = 32 << 20

    private(set) var stop: Stop?
    /// Bytes received.
    private(set) var size: Int64 = 0
    private(set) var segments: [Segment] = []
    /// The skeleton bytes, the skeleton segments' back to back.
    private(set) var skeletonBytes: [UInt8] = []
    /// The object of every file entry (with its local header's CRC-32 and size), by its
    /// local header's offset.
    private(set) var objectsByOffset: [UInt64: StreamedObject] = [:]
    /// Objects written because the store lacked them, and their bytes.
    private(set) var objectsWritten = 0
    private(set) var bytesWritten: Int64 = 0
    /// Entries whose object the store already had (nothing written for them).
    private(set) var objectsReused = 0
    /// An entry whose bytes do not match its CRC-32: reported only once the whole
    /// package has matched `packageSha256` (before that, the patch is what is wrong).
    private(set) var damage: String?

    private let objects: ObjectStore
    /// The objects of the installed package's stored entries and their CRC-32s, by entry
    /// name. A new entry of the same name and CRC-32 is compared with that namesake: held
    /// whole when small, as it streams when large (written only from where it differs).
    /// Bytes equal to the namesake's are the namesake's object without hashing them: the
    /// whole package is hashed anyway, and the old entry passed its CRC at its install.
    private let candidates: [String: (object: String, crc: UInt32)]
    /// The current entry's namesake (same name and CRC-32, a plain object), if any.
    private var namesake: String?
    /// Whether the current entry is hashed (and CRC'd) as it streams: not while it is
    /// being compared with a namesake.
    private var hashing = true
    /// The namesake being compared with, while every byte so far matched.
    private var compare: (fd: Int32, object: String)?
    /// Free bytes that must stay free (`diskReserveBytes`); nil: no check.
    private let reserve: Int64?
    /// The bytes the stream will deliver (the patch header's new size); nil: unknown.
    private let packageSize: Int64?
    /// Local headers the stream may have (`ExtractionLimits.maxEntries`): the limit
    /// extraction would apply after the hash, applied before it, so an unverified stream
    /// of tiny entries cannot make more objects (and bookkeeping) than a package may have.
    private let maxEntries: Int
    private var entries = 0
    /// The whole stream's hash, beside the applying thread.
    private let hasher = HashingThread()

    /// Which bytes are headers, entry data or the tail: the zip layout reader's streaming part.
    private var stream = ZipLocalStream()
    private var skeletonStart: Int64 = 0

    // The entry being received.
    private var entryHeaderOffset: UInt64 = 0
    private var entryStart: Int64 = 0
    private var entryLength: Int64 = 0
    private var entryRemaining: Int64 = 0
    private var entryCRC: UInt32 = 0
    private var entryName = ""
    private var crc: UInt = 0
    private var entryHasher = SHA256()
    private var filled = 0
    private var spill: (fd: Int32, name: String)?

    private let whole: UnsafeMutableRawPointer
    private let chunk: UnsafeMutableRawPointer

    init(
        objects: ObjectStore, reserve: Int64?, candidates: [String: (object: String, crc: UInt32)] = [:], packageSize: Int64? = nil,
        maxEntries: Int = ExtractionLimits().maxEntries
    ) {
        self.objects = objects
        self.reserve = reserve
        self.packageSize = packageSize
        self.maxEntries = maxEntries
        self.candidates = candidates
        whole = UnsafeMutableRawPointer.allocate(byteCount: ObjectWriter.wholeCapacity, alignment: 16)
        chunk = UnsafeMutableRawPointer.allocate(byteCount: ObjectWriter.chunkSize, alignment: 16)
    }

    deinit {
        if let compare { close(compare.fd) }
        if let spill {
            close(spill.fd)
            objects.removeTemporary(spill.name)
        }
        whole.deallocate()
        chunk.deallocate()
    }

    /// The SHA-256 of everything received (call once, after the stream ended).
    func sha256() -> String { hasher.finalize() }

    /// Whether the stream ended where a package may end: after its central directory.
    var endedCleanly: Bool { stop == nil && stream.isInTail }

    /// Takes the next bytes of the package. Returns false once the stream must stop (see `stop`).
    func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard stop == nil else { return false }
        hasher.update(bytes)
        var rest = bytes
        do {
            // `size` advances with every byte taken, so it is always the position of `rest`.
            // An entry whose header ends with these bytes begins even when none are left.
            while !rest.isEmpty || stream.hasPendingEntry, stop == nil {
                let (piece, count) = stream.next(rest)
                let taken = UnsafeRawBufferPointer(rebasing: rest[0..<count])
                rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                switch piece {
                case .skeleton:
                    try keep(taken)
                    size += Int64(count)
                case .notPlain(let why):
                    try keep(taken)
                    size += Int64(count)
                    if stop == nil { stop = .notPlain(why) }
                case .entry(let local, let name, let headerOffset): try beginEntry(local, name: name, headerOffset: headerOffset)
                case .data: try takeData(taken)
                }
            }
        } catch {
            stop = .failure(error)
        }
        return stop == nil
    }

    /// Closes the last skeleton segment; call once the stream ended cleanly.
    func finish() {
        if size > skeletonStart { segments.append(Segment(start: skeletonStart, length: size - skeletonStart, object: nil)) }
        skeletonStart = size
    }

    // MARK: - Parsing

    private func keep(_ bytes: UnsafeRawBufferPointer) throws {
        guard skeletonBytes.count + bytes.count <= Self.maxSkeletonBytes else {
            stop = .notPlain("its headers and central directory exceed \(Self.maxSkeletonBytes) bytes")
            return
        }
        skeletonBytes.append(contentsOf: bytes)
    }

    private func beginEntry(_ local: ZipCentralDirectory.LocalHeader, name: [UInt8], headerOffset: UInt64) throws {
        entryHeaderOffset = headerOffset
        entryName = String(decoding: name, as: UTF8.self)
        entryCRC = local.crc32
        entryLength = Int64(local.size)
        entryRemaining = entryLength
        entryStart = size
        crc = crc32(0, nil, 0)
        entryHasher = SHA256()
        filled = 0
        entries += 1
        guard entries <= maxEntries else {
            stop = .notPlain("more than \(maxEntries) entries")
            return
        }
        guard segments.count < PackageSkeleton.maxSegments else {
            stop = .notPlain("more than \(PackageSkeleton.maxSegments) pieces")
            return
        }
        // Nothing here is verified yet: a size past the package's end is a lie (or damage),
        // not an object to make room for. Let the file path and the hash judge the output,
        // rather than refuse the update as disk-full without falling back to the full package.
        if let packageSize, entryLength > packageSize - size {
            stop = .notPlain("an entry claims \(entryLength) bytes, past the package's end")
            return
        }
        namesake = candidates[entryName].flatMap { $0.crc == entryCRC && !$0.object.hasSuffix(".x") ? $0.object : nil }
        hashing = namesake == nil
        if entryLength > Int64(ObjectWriter.wholeCapacity) {
            if let namesake, let fd = objects.openCandidate(namesake, size: entryLength) {
                compare = (fd, namesake)
            } else {
                hashing = true
                try beginSpill(copying: 0)
            }
        }
        if entryLength == 0 { try finishEntry() }
    }

    /// The entry's next bytes (`ZipLocalStream` gives no more than it has left).
    private func takeData(_ piece: UnsafeRawBufferPointer) throws {
        let want = piece.count
        if let compare, try !matches(piece, compare.fd, at: entryLength - entryRemaining) {
            // The first byte that differs: the object is written from here, its equal start
            // copied (and hashed) from the namesake.
            try beginSpill(copying: entryLength - entryRemaining)
        }
        if hashing { digest(piece) }
        if compare != nil {
            // Equal so far: nothing written.
        } else if let spill {
            do throws(POSIXFailure) { try FileDescriptor.writeAll(spill.fd, piece) } catch {
                throw POSIXFailure("write \(objects.directory)/\(spill.name)", errno: error.errno)
            }
        } else if want > 0 {
            whole.advanced(by: filled).copyMemory(from: piece.baseAddress!, byteCount: want)
            filled += want
        }
        size += Int64(want)
        entryRemaining -= Int64(want)
        if entryRemaining == 0 { try finishEntry() }
    }

    /// The entry's bytes are all in: name its object (writing it only if the store lacks it).
    private func finishEntry() throws {
        let isDirectory = entryName.endsWithSlash
        if isDirectory && entryLength == 0 { return }
        let content = UnsafeRawBufferPointer(start: whole, count: filled)
        if let compare {
            // A large entry equal to its namesake to the last byte.
            self.compare = nil
            close(compare.fd)
            record(compare.object)
            objectsReused += 1
            return
        }
        if !hashing, let namesake, spill == nil {
            if let candidate = objects.openCandidate(namesake, size: entryLength),
               try ObjectWriter.equal(candidate, content, scratch: chunk, count: ObjectWriter.chunkSize) {
                record(namesake)
                objectsReused += 1
                return
            }
            digest(content)
        }
        if UInt32(truncatingIfNeeded: crc) != entryCRC, damage == nil {
            damage = "entry '\(PackageRules.quoted(entryName))' does not match its CRC-32"
        }
        let name = entryHasher.finalize().hex
        record(name)
        if let spill {
            self.spill = nil
            close(spill.fd)
            if let candidate = objects.openCandidate(name, size: entryLength),
               try ObjectWriter.hash(candidate, size: entryLength, scratch: chunk, count: ObjectWriter.chunkSize) == name {
                objects.removeTemporary(spill.name)
                objectsReused += 1
                return
            }
            try objects.nameTemporary(spill.name, as: name)
            try wrote(entryLength)
            return
        }
        if let candidate = objects.openCandidate(name, size: entryLength),
           try ObjectWriter.equal(candidate, content, scratch: chunk, count: ObjectWriter.chunkSize) {
            objectsReused += 1
            return
        }
        try ensureSpace(entryLength)
        let temp = try objects.createTemporary()
        do {
            defer { close(temp.fd) }
            do throws(POSIXFailure) { try FileDescriptor.writeAll(temp.fd, content) } catch {
                throw POSIXFailure("write \(objects.directory)/\(temp.name)", errno: error.errno)
            }
            try objects.nameTemporary(temp.name, as: name)
        } catch {
            objects.removeTemporary(temp.name)
            throw error
        }
        try wrote(entryLength)
    }

    /// The entry's object is `name`: its segment and its name by local header offset.
    private func record(_ name: String) {
        if entryLength > 0 {
            if entryStart > skeletonStart { segments.append(Segment(start: skeletonStart, length: entryStart - skeletonStart, object: nil)) }
            segments.append(Segment(start: entryStart, length: entryLength, object: (name, entryHeaderOffset)))
            skeletonStart = entryStart + entryLength
        }
        objectsByOffset[entryHeaderOffset] = StreamedObject(name: name, crc32: entryCRC, size: entryLength)
    }

    private func digest(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        entryHasher.update(bufferPointer: bytes)
        crc = crc32(crc, bytes.baseAddress?.assumingMemoryBound(to: Bytef.self), uInt(bytes.count))
    }

    /// Starts writing the entry to a temporary object, with its first `count` bytes copied
    /// from the namesake being compared with (they matched the stream).
    private func beginSpill(copying count: Int64) throws {
        if let compare {
            self.compare = nil
            try beginSpill(from: compare.fd, copying: count)
        } else {
            try ensureSpace(entryLength)
            spill = try objects.createTemporary()
        }
    }

    private func beginSpill(from source: Int32, copying count: Int64) throws {
        defer { close(source) }
        // From here the entry is hashed: its start now, from the copy, the rest as it streams.
        hashing = true
        try ensureSpace(entryLength)
        let temp = try objects.createTemporary()
        spill = temp
        var done: Int64 = 0
        while done < count {
            let want = Int(min(Int64(ObjectWriter.chunkSize), count - done))
            let n = pread(source, chunk, want, off_t(done))
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw POSIXFailure("read object", errno: n < 0 ? errno : EIO) }
            let copied = UnsafeRawBufferPointer(start: chunk, count: n)
            digest(copied)
            do throws(POSIXFailure) { try FileDescriptor.writeAll(temp.fd, copied) } catch {
                throw POSIXFailure("write \(objects.directory)/\(temp.name)", errno: error.errno)
            }
            done += Int64(n)
        }
    }

    /// Whether the namesake holds exactly `piece` at `offset`.
    private func matches(_ piece: UnsafeRawBufferPointer, _ fd: Int32, at offset: Int64) throws -> Bool {
        var done = 0
        while done < piece.count {
            let want = min(ObjectWriter.chunkSize, piece.count - done)
            let n = pread(fd, chunk, want, off_t(offset) + off_t(done))
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return false }
            guard memcmp(chunk, piece.baseAddress! + done, n) == 0 else { return false }
            done += n
        }
        return true
    }

    private func wrote(_ bytes: Int64) throws {
        objectsWritten += 1
        bytesWritten += bytes
        try CrashPoint.afterPatchObjectWritten.reached()
    }

    /// Refuses to write an object that would eat into the reserve: the disk check counts
    /// only what is written, object by object, since no one can know before the patch
    /// runs which entries the store lacks.
    private func ensureSpace(_ bytes: Int64) throws {
        guard let reserve, let available = FileSystem.availableBytes(at: objects.directory) else { return }
        let (needed, overflow) = bytes.addingReportingOverflow(reserve)
        guard !overflow, available >= needed else {
            // What is needed and what is free, both counts: never a negative "left".
            throw OfflineAgentError(
                .install,
                "not enough disk space: a new object of \(bytes) bytes needs \(overflow ? "more" : "\(needed)") bytes free (with the reserve of \(reserve)), \(max(available, 0)) are free",
                cause: .diskFull, path: objects.directory)
        }
    }
}
