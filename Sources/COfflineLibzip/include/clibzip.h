#ifndef OFFLINE_AGENT_CLIBZIP_H
#define OFFLINE_AGENT_CLIBZIP_H

/*
 * libzip, loaded the first time an archive is opened instead of linked.
 *
 * Why: Debian's libzip.so pulls in OpenSSL's libcrypto.so.3 (for WinZip AES, which the
 * agent refuses anyway), and the dynamic loader maps and relocates it in every process
 * that links libzip: about a quarter of a throttled `sync`'s start-up and 1.4 MB of
 * `serve`'s resident memory, for processes that never open an archive.
 *
 * The entry points keep libzip's own declarations (`__typeof__`), so a signature that does
 * not match the header does not compile. Calling a `zip_*` function directly does not link:
 * nothing links libzip, so everything goes through `c_libzip_load()`.
 */

#include <zip.h>

/* The libzip entry points the extractor uses. */
typedef struct {
    __typeof__(zip_open) *_Nonnull zip_open;
    __typeof__(zip_discard) *_Nonnull zip_discard;
    __typeof__(zip_get_num_entries) *_Nonnull zip_get_num_entries;
    __typeof__(zip_stat_init) *_Nonnull zip_stat_init;
    __typeof__(zip_stat_index) *_Nonnull zip_stat_index;
    __typeof__(zip_file_get_external_attributes) *_Nonnull zip_file_get_external_attributes;
    __typeof__(zip_fopen_index) *_Nonnull zip_fopen_index;
    __typeof__(zip_fread) *_Nonnull zip_fread;
    __typeof__(zip_fclose) *_Nonnull zip_fclose;
    __typeof__(zip_get_error) *_Nonnull zip_get_error;
    __typeof__(zip_file_get_error) *_Nonnull zip_file_get_error;
    __typeof__(zip_error_init_with_code) *_Nonnull zip_error_init_with_code;
    __typeof__(zip_error_fini) *_Nonnull zip_error_fini;
    __typeof__(zip_error_strerror) *_Nonnull zip_error_strerror;
    __typeof__(zip_compression_method_supported) *_Nonnull zip_compression_method_supported;
    __typeof__(zip_source_function_create) *_Nonnull zip_source_function_create;
    __typeof__(zip_open_from_source) *_Nonnull zip_open_from_source;
    __typeof__(zip_source_free) *_Nonnull zip_source_free;
    __typeof__(zip_error_init) *_Nonnull zip_error_init;
    __typeof__(zip_error_code_zip) *_Nonnull zip_error_code_zip;
} c_libzip_api;

/*
 * Reads `length` bytes at `offset` of an archive that is not a file (a package read back
 * from its skeleton and the store's objects): returns how many it read (fewer only at the
 * end), or -1. Called from the thread using the archive.
 */
typedef int64_t (*c_libzip_read_fn)(void *_Nullable context, void *_Nonnull buffer, size_t length, int64_t offset);

/*
 * Opens, read-only with `flags` (ZIP_RDONLY | ZIP_CHECKCONS), an archive of `size` bytes
 * read through `read`: the same checks as zip_open on a file. NULL with `*code` set
 * (a ZIP_ER_* code) on failure. `context` must outlive the archive.
 */
zip_t *_Nullable c_libzip_open_reader(const c_libzip_api *_Nonnull api, c_libzip_read_fn _Nonnull read,
                                      void *_Nullable context, int64_t size, int flags, int *_Nonnull code);

/*
 * Loads libzip once per process (thread-safe) and returns its entry points; NULL when it
 * cannot be loaded, with `*reason` pointing at why (dlerror's words, or the missing entry
 * point; static storage). A failure is final for the process.
 */
const c_libzip_api *_Nullable c_libzip_load(const char *_Nullable *_Nonnull reason);

#endif
