import COfflineLibzip

/// libzip's entry points, loaded the first time an archive is opened.
///
/// The agent does not link libzip: Debian's pulls in OpenSSL's `libcrypto.so.3`, which the
/// dynamic loader would otherwise map and relocate in every `sync` and `serve` process,
/// most of which never open an archive (`Sources/COfflineLibzip/include/clibzip.h`).
enum Libzip {
    /// The loaded entry points, or an `.extract` error naming what could not be loaded.
    static func load() throws -> c_libzip_api {
        var reason: UnsafePointer<CChar>?
        guard let api = c_libzip_load(&reason) else {
            throw OfflineAgentError(.extract, reason.map { String(cString: $0) } ?? "cannot load libzip", cause: .unexpected)
        }
        return api.pointee
    }
}

extension c_libzip_api {
    /// libzip's words for an error (`zip_error_strerror`).
    func message(_ error: UnsafeMutablePointer<zip_error_t>?) -> String {
        zip_error_strerror(error).map { String(cString: $0) } ?? "unknown libzip error"
    }

    /// libzip's words for an error code (`zip_error_init_with_code`).
    func message(forCode code: Int32) -> String {
        var error = zip_error_t()
        zip_error_init_with_code(&error, code)
        defer { zip_error_fini(&error) }
        return message(&error)
    }
}
