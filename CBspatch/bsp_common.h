/*
 * bsp_common.h: what every part of CBspatch shares, internal to the target
 * (not under include/, so neither Swift nor host apps see it): sizes and
 * thread layout, the error helper, I/O helpers, the BSDIFF40 header and the
 * control-triple check.
 *
 * Part of CBspatch, the hardened applier of BSDIFF40 patches (the format of
 * bsdiff 4.3 by Colin Percival, BSD-2-Clause; see NOTICE). Files by concern:
 *   patch_format.c  the BSDIFF40 header and control triples (bsdiff 4.3 format)
 *   apply.c         the apply loop: old + diff, extra, temporary file, rename
 *   bz_libbz2.c     libbz2 fed from the patch file: the reference decoder
 *   bz_fast.c       cbz, our own bzip2 decoder for the hot path
 *   stream.c        worker threads decoding the three streams ahead
 *   prefetch.c      the old bytes the triples add to, read ahead
 *   support.c       errors, I/O retries, test hooks
 * Cross-file functions are prefixed cbsp_ (cbz_ for the fast decoder) and
 * hidden, so the static library exports only the API in include/cbspatch.h.
 */
#ifndef BSP_COMMON_H
#define BSP_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sync_file_range, mkostemp on Linux */
#endif

#include "cbspatch.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden)

/* Thread layout and sizes; the -D overrides exist for benchmarking and for
   testing with tiny rings. */
#ifndef CBSPATCH_SLOT_SIZE
#define CBSPATCH_SLOT_SIZE (64 * 1024)
#endif
/* The control and diff streams each have one worker: the control stream is
   small, and the diff stream, long but mostly zero runs, decodes fast. */
#ifndef CBSPATCH_CTRL_SLOTS
#define CBSPATCH_CTRL_SLOTS 3
#endif
#ifndef CBSPATCH_DIFF_SLOTS
#define CBSPATCH_DIFF_SLOTS 4
#endif
/* The extra stream is new content, nearly incompressible when the package is
   deflated, and then alone decides the time: two workers split its blocks. */
#ifndef CBSPATCH_EXTRA_WORKERS
#define CBSPATCH_EXTRA_WORKERS 2
#endif
#ifndef CBSPATCH_EXTRA_SLOTS
#define CBSPATCH_EXTRA_SLOTS 6
#endif
#ifndef CBSPATCH_OLD_MIN_READ
#define CBSPATCH_OLD_MIN_READ 4096
#endif
/* Block array layouts (see cbz): the fast one costs 1.4 MB more a decoder
   and pays off where blocks are full of literal bytes, the extra stream of a
   deflated package (a third faster); control and diff streams, mostly short
   runs, gain little from it. The worst case (every stream with full blocks)
   stays at about 14 MB. */
#ifndef CBSPATCH_DIFF_FAST
#define CBSPATCH_DIFF_FAST 0
#endif
/* ...except for a small new file: its diff stream cannot fill many blocks, so
   the fast layout costs at most its 1.4 MB, and it saves a tenth of the time of
   a small patch, where the diff stream's inverse BWT is most of the work. */
#ifndef CBSPATCH_DIFF_FAST_BELOW
#define CBSPATCH_DIFF_FAST_BELOW (8 * 1024 * 1024)
#endif
#ifndef CBSPATCH_EXTRA_FAST
#define CBSPATCH_EXTRA_FAST 2 /* workers, from the first */
#endif
#ifndef CBSPATCH_PREFETCH
#define CBSPATCH_PREFETCH 1
#endif
#ifndef CBSPATCH_OUT_BUFFER
#define CBSPATCH_OUT_BUFFER (128 * 1024)
#endif

enum {
    HEADER_SIZE = 32,
    /* Compressed input is read in chunks of this size per decoder. */
    INPUT_CHUNK = 32 * 1024,
    /* Unit handed from a decoder thread to the main thread. */
    SLOT_SIZE = CBSPATCH_SLOT_SIZE,
    /* Block marks are searched for in chunks of this size. */
    SCAN_CHUNK = 64 * 1024,
    /* Old is read through a window of at most this size when the prefetch is
       not running (see old_get). */
    OLD_WINDOW = 64 * 1024,
    OLD_MIN_READ = CBSPATCH_OLD_MIN_READ,
    /* New is written through a buffer of this size. */
    OUT_BUFFER = CBSPATCH_OUT_BUFFER,
    /* Helper thread stacks: libbz2 keeps its state on the heap. */
    THREAD_STACK = 256 * 1024,
};

/* Start kernel writeback every this many bytes so the final fsync waits less. */
#ifndef CBSPATCH_WRITEBACK_STEP
#define CBSPATCH_WRITEBACK_STEP (1024 * 1024)
#endif
#define WRITEBACK_STEP ((int64_t)CBSPATCH_WRITEBACK_STEP)

#define MSG_SIZE 256

/* Fills error->message (if error is not NULL) and returns status. */
cbspatch_status cbsp_fail(cbspatch_error *error, cbspatch_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* pread until `length` bytes or end of file; returns bytes read or -1 (errno set). */
ssize_t cbsp_pread_full(int fd, void *buffer, size_t length, int64_t offset);
/* Where old bytes come from: a descriptor (read_old NULL) or the caller's callback. */
typedef struct {
    int fd;
    cbspatch_read_fn read_old;
    void *context;
} cbsp_old_source;
/* Like cbsp_pread_full, from either kind of source: bytes read, or -1 (errno set). */
ssize_t cbsp_old_read(const cbsp_old_source *source, void *buffer, size_t length, int64_t offset);
/* write all of buffer, retrying on EINTR; 0 or -1 (errno set). */
int cbsp_write_full(int fd, const void *buffer, size_t length);
/* open(2), retried on EINTR. */
int cbsp_open_retry(const char *path, int flags);
/* Writes one byte per page, through volatile so it cannot be optimised away. */
void cbsp_touch_pages(uint8_t *p, size_t size);

/* Fault injection for tests (cbspatch_testing_faults); both 0 in normal use.
   Read with __atomic_load_n. */
extern int cbsp_testing_decline_block;
extern int cbsp_testing_fake_split;

/* ------------------------------------------------------------------------ */
/* The BSDIFF40 format (patch_format.c)                                      */

typedef struct {
    int64_t ctrl_len, diff_len, new_size, file_size;
} patch_header;

/* bsdiff's offtin: 8 bytes little-endian, sign in the top bit. */
int64_t cbsp_offtin(const uint8_t *b);

/* Reads and validates the 32-byte header of the open patch `fd`. */
cbspatch_status cbsp_read_header_fd(int fd, const char *path, patch_header *h, cbspatch_error *error);

/* Why a triple is refused (TRIPLE_OK: it is not). */
typedef enum {
    TRIPLE_OK,
    TRIPLE_NEGATIVE_X,
    TRIPLE_NEGATIVE_Y,
    TRIPLE_X_OVERFLOW,
    TRIPLE_X_PAST_NEW,
    TRIPLE_Y_OVERFLOW,
    TRIPLE_Y_PAST_NEW,
    TRIPLE_OLD_BEFORE_START,
    TRIPLE_OLD_OVERFLOW,
    TRIPLE_OLD_PAST_END,
    TRIPLE_Z_OVERFLOW,
} triple_verdict;

/* Checks triple (x, y, z) at cursors (newpos, oldpos). On TRIPLE_OK the triple
   reads old[oldpos, oldpos + x) and moves the cursors to *next_new, *next_old.
   The main thread and the prefetcher both decide with this one function, so
   they agree on every read. */
triple_verdict cbsp_triple_check(int64_t newpos, int64_t oldpos, int64_t x, int64_t y, int64_t z, int64_t new_size,
                                 int64_t old_size, int64_t *next_new, int64_t *next_old);

/* The status and message for a refused triple (verdict != TRIPLE_OK). */
cbspatch_status cbsp_triple_refusal(triple_verdict verdict, uint64_t index, int64_t newpos, int64_t oldpos,
                                    const int64_t triple[3], int64_t new_size, int64_t old_size, cbspatch_error *error);

#pragma GCC visibility pop

#endif /* BSP_COMMON_H */
