import COfflineLibzip
import FoundationEssentials

/// Owns a libzip archive handle opened read-only with consistency checks; frees it in `deinit`.
///
/// `ZIP_CHECKCONS` compares local and central headers: without it libzip accepts
/// duplicate names and overlapping "bomb" entries.
final class ZipArchive {
    let handle: OpaquePointer
    let path: String
    private let zip: c_libzip_api
    /// What the archive is read through when it is not a file; kept alive as long as the handle.
    private let view: PackageView?

    /// - Parameter checked: whether libzip checks the archive's consistency; false only to
    ///   reopen a file that was opened with the checks (the extraction workers, after `plan`):
    ///   the checks read every local header again, for each handle.
    init(path: String, checked: Bool = true) throws {
        let zip = try Libzip.load()
        var code: Int32 = 0
        guard let handle = zip.zip_open(path, ZIP_RDONLY | (checked ? ZIP_CHECKCONS : 0), &code) else {
            // Duplicate names and overlapping entries are attacks (bombs); the rest is damage.
            let hostile = code == ZIP_ER_EXISTS || code == ZIP_ER_INCONS
            throw OfflineAgentError(.extract, Self.openFailure(code, zip), cause: hostile ? .hostileArchive : .archiveCorrupt, path: path)
        }
        self.handle = handle
        self.path = path
        self.zip = zip
        view = nil
    }

    /// Opens a package that exists only as a skeleton and objects (a streamed patch's
    /// output), with the same checks as a file; `path` names it in messages.
    init(view: PackageView, path: String) throws {
        let zip = try Libzip.load()
        var code: Int32 = 0
        let context = Unmanaged.passUnretained(view).toOpaque()
        let opened = withUnsafePointer(to: zip) { api in
            c_libzip_open_reader(api, { context, buffer, length, offset in
                // The view outlives the handle: this archive holds it.
                Int64(Unmanaged<PackageView>.fromOpaque(context!).takeUnretainedValue().read(into: buffer!, count: length, at: offset))
            }, context, view.size, ZIP_RDONLY | ZIP_CHECKCONS, &code)
        }
        guard let handle = opened else {
            let hostile = code == ZIP_ER_EXISTS || code == ZIP_ER_INCONS
            throw OfflineAgentError(.extract, Self.openFailure(code, zip), cause: hostile ? .hostileArchive : .archiveCorrupt, path: path)
        }
        self.handle = handle
        self.path = path
        self.zip = zip
        self.view = view
    }

    deinit {
        zip.zip_discard(handle)
        withExtendedLifetime(view) {}
    }

    var entryCount: Int64 { zip.zip_get_num_entries(handle, 0) }

    func stat(_ index: Int64) throws -> zip_stat_t {
        var st = zip_stat_t()
        zip.zip_stat_init(&st)
        guard zip.zip_stat_index(handle, zip_uint64_t(index), 0, &st) == 0 else {
            throw OfflineAgentError(.extract, "cannot read entry \(index): \(lastError)", path: path)
        }
        return st
    }

    /// The raw `(opsys, attributes)` pair of an entry.
    func externalAttributes(_ index: Int64) throws -> (opsys: UInt8, attributes: UInt32) {
        var opsys: zip_uint8_t = 0
        var attributes: zip_uint32_t = 0
        guard zip.zip_file_get_external_attributes(handle, zip_uint64_t(index), 0, &opsys, &attributes) == 0 else {
            throw OfflineAgentError(.extract, "cannot read attributes of entry \(index): \(lastError)", path: path)
        }
        return (opsys, attributes)
    }

    /// Whether this libzip can decompress `method` (a build may lack bzip2, xz or zstd).
    func canDecompress(method: UInt16) -> Bool {
        zip.zip_compression_method_supported(Int32(method), 0) != 0
    }

    func open(_ index: Int64) throws -> ZipEntryReader {
        guard let file = zip.zip_fopen_index(handle, zip_uint64_t(index), 0) else {
            throw OfflineAgentError(.extract, "cannot open entry \(index): \(lastError)", path: path)
        }
        return ZipEntryReader(file: file, zip: zip)
    }

    var lastError: String { zip.message(zip.zip_get_error(handle)) }

    /// libzip's open errors in the words of the refusal they stand for.
    private static func openFailure(_ code: Int32, _ zip: c_libzip_api) -> String {
        switch code {
        case ZIP_ER_EXISTS: "duplicate entry names"
        case ZIP_ER_INCONS: "inconsistent archive (headers disagree or entries overlap)"
        case ZIP_ER_NOZIP: "not a zip archive"
        default: "cannot open archive: \(zip.message(forCode: code))"
        }
    }
}
