/*
 * cbspatch: a hardened applier for BSDIFF40 patches (the bsdiff 4.3 format).
 *
 * Compared with the reference bspatch it
 *   - never ends the process: every failure is a status code plus a one-line message;
 *   - refuses hostile patches instead of reading or writing out of bounds
 *     (CVE-2014-9862, CVE-2020-14315, negative old cursor, zero-triple stalls,
 *     streams that go on past what the control triples use);
 *   - keeps memory bounded (about 14 MB at most): old is read with pread,
 *     new is written sequentially through a buffer, nothing is mapped or
 *     loaded whole;
 *   - decodes the three bzip2 streams (control, diff, extra) in worker
 *     threads, with a bzip2 decoder of its own that is several times faster
 *     than libbz2 on the zero runs of diff streams (libbz2 takes over any
 *     stream it declines), and splits the extra stream's blocks between two
 *     workers;
 *   - writes to a temporary file in the target directory, fsyncs it and renames
 *     it onto the target only on success.
 * It is thread-safe: concurrent calls share nothing but constant tables.
 *
 * Patch layout: "BSDIFF40", then three 8-byte sign-magnitude little-endian
 * integers (control stream length, diff stream length, new size), then the
 * control, diff and extra bzip2 streams back to back.
 */
#ifndef CBSPATCH_H
#define CBSPATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every cbspatch call. */
typedef enum {
    CBSPATCH_OK = 0,
    /** open/read/write/fsync/rename failed (strerror in message). */
    CBSPATCH_ERR_IO = 1,
    /** The patch does not start with "BSDIFF40". */
    CBSPATCH_ERR_MAGIC = 2,
    /** Truncated header; negative/overflowing lengths; ctrl/diff lengths past end of file. */
    CBSPATCH_ERR_HEADER = 3,
    /** The header's new size differs from the size the caller expects. */
    CBSPATCH_ERR_SIZE_MISMATCH = 4,
    /** bzip2 stream error, data error, or a stream cut before its end-of-stream mark. */
    CBSPATCH_ERR_BZIP2 = 5,
    /** Control values negative (x, y) or overflowing (z included), or a stream holding
        more than the control triples use. */
    CBSPATCH_ERR_CONTROL = 6,
    /** Would write past the new size, or read old bytes before 0 or past the end of old. */
    CBSPATCH_ERR_BOUNDS = 7,
    /** Too many consecutive control triples producing no output. */
    CBSPATCH_ERR_STALL = 8,
    /** A stream ended (cleanly) before the new size was reached. */
    CBSPATCH_ERR_TRUNCATED = 9,
    /** Memory or a thread could not be had. */
    CBSPATCH_ERR_NOMEM = 10,
    /** A NULL or empty path, or a NULL output pointer. */
    CBSPATCH_ERR_ARGUMENT = 11,
    /** The caller's write callback asked to stop (cbspatch_apply_reader_writer). */
    CBSPATCH_ERR_STOPPED = 12,
} cbspatch_status;

/** Filled with a one-line, NUL-terminated reason when a call fails (empty on success). */
typedef struct {
    char message[256];
} cbspatch_error;

/** Consecutive control triples with x + y == 0 tolerated before CBSPATCH_ERR_STALL. */
#define CBSPATCH_MAX_IDLE_TRIPLES 65536

/**
 * Reads and validates the 32-byte header only (magic, signs, lengths within
 * the file). Any output pointer may be NULL. `error` may be NULL.
 */
cbspatch_status cbspatch_read_header(const char *patch_path, int64_t *ctrl_len, int64_t *diff_len,
                                     int64_t *new_size, cbspatch_error *error);

/**
 * Applies the patch at `patch_path` to `old_path`, producing `new_path`.
 * expected_new_size < 0 means "not checked"; otherwise the header's new size
 * must equal it. Output goes to a temporary file created (mkstemp, mode 0644)
 * in new_path's directory, which is fsync'ed and renamed onto new_path only on
 * success; on any failure the temporary file is removed and new_path is
 * untouched. `old_path` may equal `new_path`. `error` may be NULL.
 * The directory is not fsynced after the rename: a caller that needs the
 * rename itself to survive a power loss syncs the directory.
 * Beyond the header's checks, every control triple is validated before use,
 * and each stream must end (cleanly, CRCs checked) exactly where the triples
 * stop using it.
 */
cbspatch_status cbspatch_apply(const char *old_path, const char *patch_path, const char *new_path,
                               int64_t expected_new_size, cbspatch_error *error);

/** cbspatch_apply_flags: skip the fsync before the rename (and the early
    writeback that shortens it), as bspatch does. The rename stays atomic, but a
    power loss may leave a short or empty new file; for tools, not installs. */
#define CBSPATCH_NO_SYNC 1u

/** cbspatch_apply with flags (CBSPATCH_NO_SYNC, or 0: exactly cbspatch_apply).
    Unknown flags are refused with CBSPATCH_ERR_ARGUMENT. */
cbspatch_status cbspatch_apply_flags(const char *old_path, const char *patch_path, const char *new_path,
                                     int64_t expected_new_size, unsigned flags, cbspatch_error *error);

/**
 * Reads old bytes for cbspatch_apply_reader: fills `buffer` with up to `length`
 * bytes of the old input from `offset` and returns how many it wrote (fewer only
 * at the end of the input), or -1 with errno set on failure. It is called from
 * the applying thread and from one prefetch worker at once, so it must be
 * thread-safe; it must not keep `buffer` after returning.
 */
typedef int64_t (*cbspatch_read_fn)(void *context, void *buffer, size_t length, int64_t offset);

/**
 * cbspatch_apply_flags with the old input read through `read_old(context, ...)`
 * instead of a file: an old input of `old_size` bytes assembled from pieces (a
 * package's skeleton and the files it holds) without a copy of it on disk.
 * Memory stays bounded exactly as with a file. A read that fails or comes up short
 * is CBSPATCH_ERR_IO. `error` may be NULL.
 */
cbspatch_status cbspatch_apply_reader(cbspatch_read_fn read_old, void *context, int64_t old_size,
                                      const char *patch_path, const char *new_path, int64_t expected_new_size,
                                      unsigned flags, cbspatch_error *error);

/**
 * Takes the next `length` bytes of new, in order, for cbspatch_apply_reader_writer
 * (from the applying thread only; `buffer` is not kept after returning). Returns 0
 * to go on, 1 to stop the apply (CBSPATCH_ERR_STOPPED: the caller knows why), or -1
 * with errno set for a failure of its own (CBSPATCH_ERR_IO).
 */
typedef int (*cbspatch_write_fn)(void *context, const void *buffer, size_t length);

/**
 * cbspatch_apply_reader with new handed to `write_new(write_context, ...)` as it is
 * made, in chunks of at most 128 KiB, instead of written to a file: no temporary
 * file, no fsync, no rename; the writer decides what becomes of the bytes. On any
 * failure the writer has seen a prefix of new and must discard it. Memory stays
 * bounded as with a file. `error` may be NULL.
 */
cbspatch_status cbspatch_apply_reader_writer(cbspatch_read_fn read_old, void *read_context, int64_t old_size,
                                             const char *patch_path, cbspatch_write_fn write_new,
                                             void *write_context, int64_t expected_new_size,
                                             cbspatch_error *error);

/** A short constant name for a status ("ok", "io", "magic", ...); never NULL. */
const char *cbspatch_status_name(cbspatch_status status);

/**
 * Testing only: injects the faults that the slow path exists for, so tests can
 * check that results do not change. decline_block > 0 makes the fast decoder
 * refuse the Nth bzip2 block each decoder meets (as it does for an unusual
 * block), so libbz2 takes over that stream; fake_split != 0 makes the block
 * splitter cut a stream one bit early (as a block-mark bit pattern inside a
 * block would). Process-wide; (0, 0) turns both off. Output stays identical.
 */
void cbspatch_testing_faults(int decline_block, int fake_split);

#ifdef __cplusplus
}
#endif

#endif /* CBSPATCH_H */
