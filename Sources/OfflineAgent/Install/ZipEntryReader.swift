import COfflineLibzip
import FoundationEssentials

/// Owns one open entry. `close()` reports the CRC check: libzip 1.7.3 reports a CRC
/// mismatch only after `zip_fread` has returned 0 and through `zip_fclose`'s result.
final class ZipEntryReader {
    private var file: OpaquePointer?
    private let zip: c_libzip_api

    init(file: OpaquePointer, zip: c_libzip_api) {
        self.file = file
        self.zip = zip
    }

    deinit { if let file { _ = zip.zip_fclose(file) } }

    /// Reads up to `count` bytes; 0 at the end of the entry.
    func read(into buffer: UnsafeMutableRawPointer, count: Int) throws -> Int {
        guard let file else { return 0 }
        let n = zip.zip_fread(file, buffer, zip_uint64_t(count))
        if n < 0 {
            throw OfflineAgentError(.extract, "read failed: \(zip.message(zip.zip_file_get_error(file)))")
        }
        return Int(n)
    }

    /// Closes the entry; throws when libzip reports an error such as a CRC mismatch.
    func close() throws {
        guard let file else { return }
        self.file = nil
        let code = zip.zip_fclose(file)
        if code != 0 {
            throw OfflineAgentError(.extract, "entry check failed: \(zip.message(forCode: code))")
        }
    }
}
