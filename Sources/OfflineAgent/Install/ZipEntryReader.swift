import CLibzip
import FoundationEssentials

/// Owns one open entry. `close()` reports the CRC check: libzip 1.7.3 reports a CRC
/// mismatch only after `zip_fread` has returned 0 and through `zip_fclose`'s result.
final class ZipEntryReader {
    private var file: OpaquePointer?

    init(file: OpaquePointer) { self.file = file }

    deinit { if let file { zip_fclose(file) } }

    /// Reads up to `count` bytes; 0 at the end of the entry.
    func read(into buffer: UnsafeMutableRawPointer, count: Int) throws -> Int {
        guard let file else { return 0 }
        let n = zip_fread(file, buffer, zip_uint64_t(count))
        if n < 0 {
            throw OfflineAgentError(.extract, "read failed: \(String(cString: zip_error_strerror(zip_file_get_error(file))))")
        }
        return Int(n)
    }

    /// Closes the entry; throws when libzip reports an error such as a CRC mismatch.
    func close() throws {
        guard let file else { return }
        self.file = nil
        let code = zip_fclose(file)
        if code != 0 {
            throw OfflineAgentError(.extract, "entry check failed: \(ZipArchive.message(forCode: code))")
        }
    }
}
