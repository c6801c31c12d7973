#include "clibzip.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/*
 * libzip's soname: 4 on Debian (bookworm's 1.7.3 is libzip.so.4) and Ubuntu 22.04 and
 * later; 5 where the upstream numbering is kept. Every entry point used here exists in
 * libzip 1.7 under either name, and each one is looked up by name: a library without
 * one is refused, never called.
 */
static const char *const sonames[] = { "libzip.so.4", "libzip.so.5" };

static c_libzip_api api;
static const c_libzip_api *loaded;
static char failure[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *library = NULL;
    for (size_t i = 0; i < sizeof sonames / sizeof *sonames && library == NULL; i++) {
        library = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(failure, sizeof failure, "cannot load libzip (install libzip4): %s", reason ? reason : "not found");
        return;
    }
#define C_LIBZIP_RESOLVE(name)                                                          \
    if ((api.name = (__typeof__(name) *)dlsym(library, #name)) == NULL) {               \
        snprintf(failure, sizeof failure, "the loaded libzip has no %s (libzip 1.7 or later is needed)", #name); \
        return;                                                                         \
    }
    C_LIBZIP_RESOLVE(zip_open)
    C_LIBZIP_RESOLVE(zip_discard)
    C_LIBZIP_RESOLVE(zip_get_num_entries)
    C_LIBZIP_RESOLVE(zip_stat_init)
    C_LIBZIP_RESOLVE(zip_stat_index)
    C_LIBZIP_RESOLVE(zip_file_get_external_attributes)
    C_LIBZIP_RESOLVE(zip_fopen_index)
    C_LIBZIP_RESOLVE(zip_fread)
    C_LIBZIP_RESOLVE(zip_fclose)
    C_LIBZIP_RESOLVE(zip_get_error)
    C_LIBZIP_RESOLVE(zip_file_get_error)
    C_LIBZIP_RESOLVE(zip_error_init_with_code)
    C_LIBZIP_RESOLVE(zip_error_fini)
    C_LIBZIP_RESOLVE(zip_error_strerror)
    C_LIBZIP_RESOLVE(zip_compression_method_supported)
#undef C_LIBZIP_RESOLVE
    loaded = &api;
}

const c_libzip_api *c_libzip_load(const char **reason) {
    pthread_once(&once, load);
    *reason = loaded == NULL ? failure : NULL;
    return loaded;
}
