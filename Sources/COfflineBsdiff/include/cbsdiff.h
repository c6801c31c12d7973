/*
 * cbsdiff: a native bsdiff producing BSDIFF40 (bsdiff 4.3 format) patches.
 *
 * The difference algorithm is Colin Percival's bsdiff 4.3 (BSD licensed);
 * the suffix array of the old file comes from libdivsufsort instead of
 * qsufsort, which is what makes it fast. Patches apply with any BSDIFF40
 * bspatch (for example Debian's `bspatch`).
 *
 * Nothing in this library ends the process: every failure is a status code
 * plus a one-line message.
 */
#ifndef CBSDIFF_H
#define CBSDIFF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of cbsdiff_create. */
typedef enum {
    CBSDIFF_OK = 0,
    /** Reading an input or writing the patch failed (message names the file). */
    CBSDIFF_ERR_IO = 1,
    /** Memory could not be allocated. */
    CBSDIFF_ERR_NOMEM = 2,
    /** libbz2 reported an error while compressing. */
    CBSDIFF_ERR_BZIP2 = 3,
    /** A NULL or empty path was given. */
    CBSDIFF_ERR_ARGUMENT = 4,
    /** The old file is too large for a 32-bit suffix array (INT32_MAX bytes or more). */
    CBSDIFF_ERR_TOO_LARGE = 5
} cbsdiff_status;

/** Filled with a one-line, NUL-terminated description when a call fails. */
typedef struct {
    char message[256];
} cbsdiff_error;

/**
 * Writes a BSDIFF40 patch turning the file at old_path into the file at
 * new_path.
 *
 * The patch is written to a temporary file (mkstemp) in patch_path's
 * directory, fsync'ed and renamed onto patch_path on success; on failure the
 * temporary file is removed and patch_path is left untouched. The patch file
 * gets mode 0666 minus the process umask, like a file made by bsdiff(1).
 *
 * Memory: about 5 bytes per old-file byte, plus the new file, plus the
 * compressed patch, plus ~25 MiB of bzip2 state. The call blocks; inside,
 * one helper thread (with all signals blocked) compresses while the search
 * runs.
 *
 * error may be NULL. On success error->message is set to the empty string.
 * Thread-safe: calls share no state.
 */
cbsdiff_status cbsdiff_create(const char *old_path, const char *new_path,
                              const char *patch_path, cbsdiff_error *error);

#ifdef __cplusplus
}
#endif

#endif /* CBSDIFF_H */
