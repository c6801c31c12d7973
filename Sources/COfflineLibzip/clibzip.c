#include "clibzip.h"

#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    C_LIBZIP_RESOLVE(zip_source_function_create)
    C_LIBZIP_RESOLVE(zip_open_from_source)
    C_LIBZIP_RESOLVE(zip_source_free)
    C_LIBZIP_RESOLVE(zip_error_init)
    C_LIBZIP_RESOLVE(zip_error_code_zip)
#undef C_LIBZIP_RESOLVE
    loaded = &api;
}

const c_libzip_api *c_libzip_load(const char **reason) {
    pthread_once(&once, load);
    *reason = loaded == NULL ? failure : NULL;
    return loaded;
}

/* A seekable, read-only libzip source over a read callback (libzip's source protocol). */
typedef struct {
    c_libzip_read_fn read;
    void *context;
    int64_t size, position;
    int error[2]; /* zip error code, system errno */
} reader_source;

static zip_int64_t reader_callback(void *userdata, void *data, zip_uint64_t length, zip_source_cmd_t command) {
    reader_source *r = userdata;
    switch (command) {
    case ZIP_SOURCE_OPEN:
        r->position = 0;
        return 0;
    case ZIP_SOURCE_READ: {
        int64_t left = r->size - r->position;
        if (left <= 0) return 0;
        size_t want = length < (zip_uint64_t)left ? (size_t)length : (size_t)left;
        int64_t got = r->read(r->context, data, want, r->position);
        if (got < 0) {
            r->error[0] = ZIP_ER_READ;
            r->error[1] = errno;
            return -1;
        }
        r->position += got;
        return got;
    }
    case ZIP_SOURCE_CLOSE:
        return 0;
    case ZIP_SOURCE_STAT: {
        if (length < sizeof(zip_stat_t)) return -1;
        zip_stat_t *st = data;
        memset(st, 0, sizeof *st);
        st->valid = ZIP_STAT_SIZE;
        st->size = (zip_uint64_t)r->size;
        return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR:
        if (length < sizeof r->error) return -1;
        memcpy(data, r->error, sizeof r->error);
        return sizeof r->error;
    case ZIP_SOURCE_FREE:
        free(r);
        return 0;
    case ZIP_SOURCE_SEEK: {
        if (length < sizeof(zip_source_args_seek_t)) return -1;
        const zip_source_args_seek_t *seek = data;
        int64_t base = seek->whence == SEEK_SET ? 0 : seek->whence == SEEK_CUR ? r->position : r->size;
        int64_t target;
        /* The offset comes from the archive's own fields: a sum past INT64_MAX is refused, not wrapped (UB). */
        if (__builtin_add_overflow(base, seek->offset, &target)) target = -1;
        if (seek->whence != SEEK_SET && seek->whence != SEEK_CUR && seek->whence != SEEK_END) target = -1;
        if (target < 0 || target > r->size) {
            r->error[0] = ZIP_ER_INVAL;
            r->error[1] = 0;
            return -1;
        }
        r->position = target;
        return 0;
    }
    case ZIP_SOURCE_TELL:
        return r->position;
    case ZIP_SOURCE_SUPPORTS:
        return ZIP_SOURCE_SUPPORTS_SEEKABLE;
    default:
        r->error[0] = ZIP_ER_OPNOTSUPP;
        r->error[1] = 0;
        return -1;
    }
}

zip_t *c_libzip_open_reader(const c_libzip_api *api, c_libzip_read_fn read, void *context, int64_t size, int flags,
                            int *code) {
    reader_source *r = calloc(1, sizeof *r);
    if (r == NULL) {
        *code = ZIP_ER_MEMORY;
        return NULL;
    }
    r->read = read;
    r->context = context;
    r->size = size;
    zip_error_t error;
    api->zip_error_init(&error);
    zip_source_t *source = api->zip_source_function_create(reader_callback, r, &error);
    if (source == NULL) {
        free(r);
        *code = api->zip_error_code_zip(&error);
        api->zip_error_fini(&error);
        return NULL;
    }
    /* From here the source owns r (ZIP_SOURCE_FREE). */
    zip_t *archive = api->zip_open_from_source(source, flags, &error);
    if (archive == NULL) {
        *code = api->zip_error_code_zip(&error);
        api->zip_error_fini(&error);
        api->zip_source_free(source);
        return NULL;
    }
    api->zip_error_fini(&error);
    return archive;
}
