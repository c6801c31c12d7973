/*
 * cbspatch: hardened BSDIFF40 (bsdiff 4.3) patch applier. See include/cbspatch.h.
 *
 * Structure:
 *   - each of the three bzip2 streams (control, diff, extra) is decoded ahead
 *     by worker threads into rings of fixed slots ("stream"); decoding is
 *     nearly all of the work and the streams are independent, so on two cores
 *     they overlap with each other and with the main thread's work;
 *   - the extra stream, which alone decides the time when the package is
 *     deflated (new content compresses badly), is split at its bzip2 block
 *     marks and decoded by two workers at once;
 *   - decoding uses cbz, a bzip2 decoder of our own that writes runs with
 *     memset and checks CRCs a word (or a whole zero run) at a time, several
 *     times faster than libbz2 on the long zero runs of diff streams; libbz2
 *     remains the reference and takes over any stream that cbz declines;
 *   - the control stream's worker also reads ahead the old bytes that the
 *     triples add to (thousands of small preads) into a ring of its own;
 *   - the calling thread validates every triple before touching data, adds
 *     diff bytes to old bytes and writes new through a buffer into a
 *     temporary file.
 * Memory is bounded (about 14 MB at most, less for small patches) whatever the
 * size of old, new or the patch: nothing is mapped or loaded whole.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sync_file_range on Linux */
#endif

#include "cbspatch.h"

#include <bzlib.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

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

static cbspatch_status fail(cbspatch_error *error, cbspatch_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static cbspatch_status fail(cbspatch_error *error, cbspatch_status status, const char *format, ...) {
    if (error != NULL) {
        va_list args;
        va_start(args, format);
        vsnprintf(error->message, sizeof error->message, format, args);
        va_end(args);
    }
    return status;
}

/* Fault injection for tests (cbspatch_testing_faults); both 0 in normal use. */
static int testing_decline_block;
static int testing_fake_split;

void cbspatch_testing_faults(int decline_block, int fake_split) {
    __atomic_store_n(&testing_decline_block, decline_block, __ATOMIC_RELAXED);
    __atomic_store_n(&testing_fake_split, fake_split, __ATOMIC_RELAXED);
}

const char *cbspatch_status_name(cbspatch_status status) {
    switch (status) {
    case CBSPATCH_OK: return "ok";
    case CBSPATCH_ERR_IO: return "io";
    case CBSPATCH_ERR_MAGIC: return "magic";
    case CBSPATCH_ERR_HEADER: return "header";
    case CBSPATCH_ERR_SIZE_MISMATCH: return "size-mismatch";
    case CBSPATCH_ERR_BZIP2: return "bzip2";
    case CBSPATCH_ERR_CONTROL: return "control";
    case CBSPATCH_ERR_BOUNDS: return "bounds";
    case CBSPATCH_ERR_STALL: return "stall";
    case CBSPATCH_ERR_TRUNCATED: return "truncated";
    case CBSPATCH_ERR_NOMEM: return "nomem";
    case CBSPATCH_ERR_ARGUMENT: return "argument";
    }
    return "unknown";
}

/* bsdiff's offtin: 8 bytes little-endian, top bit of the last byte is the sign.
   The magnitude is at most 2^63 - 1, so negating it cannot overflow. */
static int64_t offtin(const uint8_t *b) {
    uint64_t magnitude = 0;
    for (int i = 7; i >= 0; i--) magnitude = (magnitude << 8) | b[i];
    int negative = (magnitude >> 63) != 0;
    int64_t value = (int64_t)(magnitude & UINT64_C(0x7fffffffffffffff));
    return negative ? -value : value;
}

/* pread until `length` bytes or end of file; returns bytes read or -1 (errno set). */
static ssize_t pread_full(int fd, void *buffer, size_t length, int64_t offset) {
    size_t done = 0;
    while (done < length) {
        ssize_t r = pread(fd, (char *)buffer + done, length - done, (off_t)(offset + (int64_t)done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static int write_full(int fd, const void *buffer, size_t length) {
    size_t done = 0;
    while (done < length) {
        ssize_t r = write(fd, (const char *)buffer + done, length - done);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

static int open_retry(const char *path, int flags) {
    int fd;
    do fd = open(path, flags);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* ------------------------------------------------------------------------ */
/* Header                                                                    */

typedef struct {
    int64_t ctrl_len, diff_len, new_size, file_size;
} patch_header;

static cbspatch_status read_header_fd(int fd, const char *path, patch_header *h, cbspatch_error *error) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return fail(error, CBSPATCH_ERR_IO, "cannot stat patch %s: %s", path, strerror(errno));
    uint8_t header[HEADER_SIZE];
    ssize_t got = pread_full(fd, header, sizeof header, 0);
    if (got < 0) return fail(error, CBSPATCH_ERR_IO, "cannot read patch %s: %s", path, strerror(errno));
    static const char magic[8] = {'B', 'S', 'D', 'I', 'F', 'F', '4', '0'};
    size_t magic_seen = (size_t)got < sizeof magic ? (size_t)got : sizeof magic;
    if (memcmp(header, magic, magic_seen) != 0) {
        char shown[9];
        for (size_t i = 0; i < 8; i++)
            shown[i] = (i < magic_seen && header[i] >= 0x20 && header[i] < 0x7f) ? (char)header[i] : '.';
        shown[magic_seen] = '\0';
        return fail(error, CBSPATCH_ERR_MAGIC, "not a BSDIFF40 patch (starts with \"%s\")", shown);
    }
    if (got < HEADER_SIZE)
        return fail(error, CBSPATCH_ERR_HEADER, "truncated header: patch is %zd bytes, the header alone is %d",
                    got, HEADER_SIZE);
    h->ctrl_len = offtin(header + 8);
    h->diff_len = offtin(header + 16);
    h->new_size = offtin(header + 24);
    h->file_size = (int64_t)st.st_size;
    if (h->ctrl_len < 0)
        return fail(error, CBSPATCH_ERR_HEADER, "ctrl length %lld is negative", (long long)h->ctrl_len);
    if (h->diff_len < 0)
        return fail(error, CBSPATCH_ERR_HEADER, "diff length %lld is negative", (long long)h->diff_len);
    if (h->new_size < 0)
        return fail(error, CBSPATCH_ERR_HEADER, "new size %lld is negative", (long long)h->new_size);
    int64_t end;
    if (__builtin_add_overflow((int64_t)HEADER_SIZE, h->ctrl_len, &end) ||
        __builtin_add_overflow(end, h->diff_len, &end))
        return fail(error, CBSPATCH_ERR_HEADER, "ctrl length %lld + diff length %lld overflows",
                    (long long)h->ctrl_len, (long long)h->diff_len);
    if (end > h->file_size)
        return fail(error, CBSPATCH_ERR_HEADER,
                    "ctrl length %lld + diff length %lld run past the end of the %lld-byte patch",
                    (long long)h->ctrl_len, (long long)h->diff_len, (long long)h->file_size);
    return CBSPATCH_OK;
}

cbspatch_status cbspatch_read_header(const char *patch_path, int64_t *ctrl_len, int64_t *diff_len,
                                     int64_t *new_size, cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    if (patch_path == NULL || patch_path[0] == '\0')
        return fail(error, CBSPATCH_ERR_ARGUMENT, "patch path is empty");
    int fd = open_retry(patch_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(error, CBSPATCH_ERR_IO, "cannot open patch %s: %s", patch_path, strerror(errno));
    patch_header h;
    cbspatch_status status = read_header_fd(fd, patch_path, &h, error);
    close(fd);
    if (status != CBSPATCH_OK) return status;
    if (ctrl_len != NULL) *ctrl_len = h.ctrl_len;
    if (diff_len != NULL) *diff_len = h.diff_len;
    if (new_size != NULL) *new_size = h.new_size;
    return CBSPATCH_OK;
}

/* ------------------------------------------------------------------------ */
/* Decoder memory: one arena per worker, allocated once per apply. It holds  */
/* cbz's block array, or, if the stream falls back, everything libbz2       */
/* allocates (served by arena_alloc), so no decoder mallocs while running.  */

typedef struct {
    uint8_t *base;
    size_t size, used;
    unsigned live;
} bz_arena;

/* Symbols in the largest bzip2 block (level 9). */
#define CBZ_BLOCK_MAX 900000

/* cbz's links for a level-9 block (2.5 bytes a symbol), or the same arrays
   plus its DState for libbz2 in small mode. */
static size_t arena_size(int fast) {
    size_t arrays = fast ? (size_t)CBZ_BLOCK_MAX * 4 : (size_t)CBZ_BLOCK_MAX * 2 + CBZ_BLOCK_MAX / 2;
    return (arrays + 96 * 1024 + 4095) & ~(size_t)4095;
}

static int arena_init(bz_arena *a, int fast) {
    a->size = arena_size(fast);
    a->used = 0;
    a->live = 0;
    a->base = malloc(a->size);
    return a->base == NULL ? -1 : 0;
}

/* Writes one byte per page, through volatile so it cannot be optimised away. */
static void touch_pages(uint8_t *p, size_t size) {
    volatile uint8_t *v = p;
    for (size_t i = 0; i < size; i += 4096) v[i] = 0;
    if (size > 0) v[size - 1] = 0;
}

static void arena_destroy(bz_arena *a) {
    free(a->base);
    a->base = NULL;
}

static void *arena_alloc(void *opaque, int items, int size) {
    bz_arena *a = opaque;
    if (items < 0 || size < 0) return NULL;
    size_t n = ((size_t)items * (size_t)size + 63) & ~(size_t)63;
    if (a->base != NULL && a->size - a->used >= n) {
        void *p = a->base + a->used;
        a->used += n;
        a->live++;
        return p;
    }
    return malloc(n != 0 ? n : 1); /* never expected; still correct */
}

static void arena_free(void *opaque, void *p) {
    bz_arena *a = opaque;
    if (p == NULL) return;
    if (a->base != NULL && (uint8_t *)p >= a->base && (uint8_t *)p < a->base + a->size) {
        if (--a->live == 0) a->used = 0;
        return;
    }
    free(p);
}

/* ------------------------------------------------------------------------ */
/* libbz2, fed straight from the patch file: the reference decoder, used    */
/* when cbz (below) declines a stream.                                      */

#define BLOCK_MAGIC UINT64_C(0x314159265359)
#define EOS_MAGIC UINT64_C(0x177245385090)

enum { DECODE_MORE = 1, DECODE_END = 0, DECODE_ERROR = -1 };

typedef struct {
    const char *name;
    int fd;
    int64_t region_offset, region_length; /* the stream's bytes in the patch */
    bz_stream bz;
    int ready;
    bz_arena *arena;
    uint8_t *input; /* INPUT_CHUNK */
    int64_t next_offset, input_left;
} decoder;

/* Reads n <= 56 bits at bit position `bit` of the stream region. */
static int region_bits(int fd, int64_t region_offset, int64_t region_length, int64_t bit, int n, uint64_t *value) {
    if (bit < 0 || n < 1 || n > 56 || bit + n > region_length * 8) return -1;
    int64_t first = bit / 8, last = (bit + n - 1) / 8;
    uint8_t bytes[8];
    size_t count = (size_t)(last - first + 1);
    if (pread_full(fd, bytes, count, region_offset + first) != (ssize_t)count) return -1;
    uint64_t window = 0;
    for (size_t i = 0; i < count; i++) window = (window << 8) | bytes[i];
    int skip = (int)(bit % 8);
    int total = (int)count * 8;
    *value = (window >> (total - skip - n)) & ((UINT64_C(1) << n) - 1);
    return 0;
}

static int decoder_begin(decoder *d, cbspatch_status *status, char *message) {
    memset(&d->bz, 0, sizeof d->bz);
    d->bz.bzalloc = arena_alloc;
    d->bz.bzfree = arena_free;
    d->bz.opaque = d->arena;
    d->next_offset = d->region_offset;
    d->input_left = d->region_length;
    int ret = BZ2_bzDecompressInit(&d->bz, 0, 1); /* small mode: fits the arena */
    if (ret != BZ_OK) {
        *status = ret == BZ_MEM_ERROR ? CBSPATCH_ERR_NOMEM : CBSPATCH_ERR_BZIP2;
        snprintf(message, MSG_SIZE, "cannot start the bzip2 decoder for the %s stream (error %d)", d->name, ret);
        return -1;
    }
    d->ready = 1;
    return 0;
}

static void decoder_end(decoder *d) {
    if (d->ready) BZ2_bzDecompressEnd(&d->bz);
    d->ready = 0;
}

/* Refills d->input; returns bytes placed (0 = no more input) or -1 on an I/O error. */
static ssize_t decoder_fill(decoder *d, cbspatch_status *status, char *message) {
    if (d->input_left == 0) return 0;
    size_t want = d->input_left < INPUT_CHUNK ? (size_t)d->input_left : (size_t)INPUT_CHUNK;
    ssize_t r = pread_full(d->fd, d->input, want, d->next_offset);
    if (r <= 0) {
        *status = CBSPATCH_ERR_IO;
        if (r < 0)
            snprintf(message, MSG_SIZE, "reading the %s stream at offset %lld: %s", d->name,
                     (long long)d->next_offset, strerror(errno));
        else
            snprintf(message, MSG_SIZE, "patch file shrank while reading the %s stream", d->name);
        return -1;
    }
    d->next_offset += r;
    d->input_left -= r;
    return r;
}

/* Decodes into out[0..capacity): DECODE_MORE when out is full, DECODE_END at
   the end of the stream, DECODE_ERROR with status/message set. */
static int decoder_run(decoder *d, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status,
                       char *message) {
    d->bz.next_out = (char *)out;
    d->bz.avail_out = (unsigned)capacity;
    *produced = 0;
    for (;;) {
        int exhausted = 0;
        if (d->bz.avail_in == 0) {
            ssize_t r = decoder_fill(d, status, message);
            if (r < 0) return DECODE_ERROR;
            if (r == 0)
                exhausted = 1;
            else {
                d->bz.next_in = (char *)d->input;
                d->bz.avail_in = (unsigned)r;
            }
        }
        unsigned in_before = d->bz.avail_in, out_before = d->bz.avail_out;
        int ret = BZ2_bzDecompress(&d->bz);
        *produced = capacity - d->bz.avail_out;
        if (ret == BZ_STREAM_END) return DECODE_END;
        if (ret != BZ_OK) {
            *status = CBSPATCH_ERR_BZIP2;
            switch (ret) {
            case BZ_DATA_ERROR_MAGIC:
                snprintf(message, MSG_SIZE, "%s stream is not bzip2 data (bad stream magic)", d->name);
                break;
            case BZ_DATA_ERROR:
                snprintf(message, MSG_SIZE, "%s stream: bzip2 data error (corrupt data or CRC mismatch)", d->name);
                break;
            case BZ_MEM_ERROR:
                *status = CBSPATCH_ERR_NOMEM;
                snprintf(message, MSG_SIZE, "%s stream: bzip2 decoder out of memory", d->name);
                break;
            default:
                snprintf(message, MSG_SIZE, "%s stream: bzip2 error %d", d->name, ret);
                break;
            }
            return DECODE_ERROR;
        }
        if (d->bz.avail_out == 0) return DECODE_MORE;
        if (d->bz.avail_in == 0 && exhausted) {
            *status = CBSPATCH_ERR_BZIP2;
            snprintf(message, MSG_SIZE, "%s stream: compressed data ends before the bzip2 end-of-stream mark",
                     d->name);
            return DECODE_ERROR;
        }
        if (d->bz.avail_in != 0 && d->bz.avail_in == in_before && d->bz.avail_out == out_before) {
            /* libbz2 never does this; refuse rather than spin if it ever does. */
            *status = CBSPATCH_ERR_BZIP2;
            snprintf(message, MSG_SIZE, "%s stream: bzip2 decoder made no progress", d->name);
            return DECODE_ERROR;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* cbz: a bzip2 decoder of our own for the hot path.                         */
/*                                                                          */
/* Why: libbz2 updates its CRC one output byte at a time inside the run     */
/* expansion loop, which makes the long zero runs of a diff stream cost ~6  */
/* cycles per byte, most of the apply time for stored packages. cbz writes  */
/* runs with memset and checks the CRC afterwards with a slicing-by-8 table, */
/* and it can start at any bit, so it decodes split blocks directly.        */
/* libbz2 stays the authority: whenever cbz refuses something before any    */
/* output of the block at hand (an odd header, a randomised block, a table  */
/* it does not like), the stream is decoded again by libbz2 (see            */
/* stream_fall_back), so cbz can only change the speed, not the verdict.    */

#define CBZ_MAX_GROUPS 6
#define CBZ_MAX_ALPHA 258
#define CBZ_MAX_CODE_LEN 23 /* array bound, as in libbz2; lengths are 1..20 */
#define CBZ_MAX_SELECTORS 18002
#define CBZ_GROUP_SIZE 50
#define CBZ_LUT_BITS 10 /* Huffman codes up to this long decode with one lookup */

static uint32_t crc_tables[8][256];
/* crc_zero_run[j][v]: the CRC register (v << 8j) after 251 zero bytes. bzip2
   stores runs as four bytes and a count of up to 251 more, so the zero
   stretches of a diff stream expand mostly into 251-byte runs; the CRC is
   linear, so four lookups replace 251 byte steps. */
static uint32_t crc_zero_run[4][256];
static pthread_once_t crc_tables_once = PTHREAD_ONCE_INIT;
#define CRC_ZERO_RUN 251

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        uint32_t b = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
        crc = crc_tables[7][a >> 24] ^ crc_tables[6][(a >> 16) & 0xff] ^ crc_tables[5][(a >> 8) & 0xff] ^
              crc_tables[4][a & 0xff] ^ crc_tables[3][b >> 24] ^ crc_tables[2][(b >> 16) & 0xff] ^
              crc_tables[1][(b >> 8) & 0xff] ^ crc_tables[0][b & 0xff];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) crc = (crc << 8) ^ crc_tables[0][(crc >> 24) ^ *p++];
    return crc;
}

/* bzip2's CRC: CRC-32, polynomial 0x04c11db7, most significant bit first. */
static void crc_tables_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i << 24;
        for (int k = 0; k < 8; k++) c = (c & 0x80000000u) ? (c << 1) ^ 0x04c11db7u : c << 1;
        crc_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_tables[t][i] = (crc_tables[t - 1][i] << 8) ^ crc_tables[0][crc_tables[t - 1][i] >> 24];
    /* Linear: run the 32 single-bit registers through the zeros, then
       combine their images for every byte value. */
    static const uint8_t zeros[CRC_ZERO_RUN];
    uint32_t image[32];
    for (int b = 0; b < 32; b++) image[b] = crc_update(UINT32_C(1) << b, zeros, CRC_ZERO_RUN);
    for (int j = 0; j < 4; j++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t c = 0;
            for (int k = 0; k < 8; k++)
                if (v & (1u << k)) c ^= image[8 * j + k];
            crc_zero_run[j][v] = c;
        }
}

static inline uint32_t crc_after_zero_run(uint32_t crc) {
    return crc_zero_run[0][crc & 0xff] ^ crc_zero_run[1][(crc >> 8) & 0xff] ^ crc_zero_run[2][(crc >> 16) & 0xff] ^
           crc_zero_run[3][crc >> 24];
}


enum { CBZ_HEADER, CBZ_MARK, CBZ_OUTPUT, CBZ_DONE };

typedef struct {
    const char *name;
    int fd;
    int64_t region_offset, region_length;
    /* bit reader */
    uint8_t *in;
    size_t in_len, in_pos;
    int64_t in_next; /* next region byte to load */
    uint64_t bits;
    int nbits;
    int64_t bitpos; /* region bit of the next unread bit */
    /* stream */
    int state, level, piece;
    int64_t piece_end, align_to;
    uint32_t combined, piece_crc;
    /* block */
    /* The block's inverse-BWT links, 20 bits each: low 16 in ll16, high 4 in
       ll4 (libbz2's "small" layout, 2.5 bytes a symbol instead of 4: four
       decoders run at once, and the walk is bound by cache misses anyway).
       During parsing ll16 holds the symbols. */
    uint16_t *ll16; /* CBZ_BLOCK_MAX entries */
    uint8_t *ll4;   /* CBZ_BLOCK_MAX / 2 */
    /* Or, when `fast`, libbz2's fast layout: tt[i] = symbol | next index << 8,
       4 bytes a symbol but built and walked without the dependent cycle
       reversal; for the extra stream, whose blocks are full and decide the
       time when the package is deflated. */
    uint32_t *tt;
    int fast;
    uint8_t bucket[CBZ_BLOCK_MAX / 1024 + 1]; /* symbol at position 1024*i: starts the cftab search */
    uint32_t nblock, tpos, used, stored_crc, crc, pending;
    int last, run;
    uint8_t pending_ch;
    /* tables */
    uint8_t seq_to_unseq[256];
    uint8_t selector[CBZ_MAX_SELECTORS];
    uint8_t len[CBZ_MAX_GROUPS][CBZ_MAX_ALPHA];
    int32_t limit[CBZ_MAX_GROUPS][CBZ_MAX_CODE_LEN], base[CBZ_MAX_GROUPS][CBZ_MAX_CODE_LEN];
    int32_t perm[CBZ_MAX_GROUPS][CBZ_MAX_ALPHA];
    int32_t minlen[CBZ_MAX_GROUPS];
    /* lut[g][next CBZ_LUT_BITS bits] = code length << 9 | symbol, or 0 for
       "decode the slow way" (longer codes, and anything odd). */
    uint16_t lut[CBZ_MAX_GROUPS][1 << CBZ_LUT_BITS];
    uint32_t unzftab[256], cftab[257];
    int test_blocks;
} cbz;

/* Outcome of the block parser besides success. */
enum { CBZ_OK = 0, CBZ_CORRUPT = -1, CBZ_SHORT = -2, CBZ_IO = -3, CBZ_UNSUPPORTED = -4 };

static int cbz_need(cbz *z, int n) {
    while (z->nbits < n) {
        if (z->in_pos == z->in_len) {
            if (z->in_next >= z->region_length) return CBZ_SHORT;
            int64_t left = z->region_length - z->in_next;
            size_t want = left < INPUT_CHUNK ? (size_t)left : (size_t)INPUT_CHUNK;
            ssize_t got = pread_full(z->fd, z->in, want, z->region_offset + z->in_next);
            if (got <= 0) return CBZ_IO;
            z->in_next += got;
            z->in_len = (size_t)got;
            z->in_pos = 0;
        }
        z->bits = (z->bits << 8) | z->in[z->in_pos++];
        z->nbits += 8;
    }
    return CBZ_OK;
}

static inline uint32_t cbz_take(cbz *z, int n) {
    uint32_t v = (uint32_t)((z->bits >> (z->nbits - n)) & ((UINT64_C(1) << n) - 1));
    z->nbits -= n;
    z->bitpos += n;
    return v;
}

#define CBZ_GET(var, n)                     \
    do {                                    \
        int need_ = cbz_need(z, (n));       \
        if (need_ != CBZ_OK) return need_;  \
        (var) = cbz_take(z, (n));           \
    } while (0)

static void cbz_seek(cbz *z, int64_t bit) {
    z->align_to = 0;
    z->in_next = bit / 8;
    z->in_len = z->in_pos = 0;
    z->bits = 0;
    z->nbits = 0;
    z->bitpos = (bit / 8) * 8;
}

static inline uint32_t cbz_link(const cbz *z, uint32_t i) {
    return (uint32_t)z->ll16[i] | ((uint32_t)((z->ll4[i >> 1] >> ((i << 2) & 4)) & 0xf) << 16);
}

static inline void cbz_set_link(cbz *z, uint32_t i, uint32_t v) {
    z->ll16[i] = (uint16_t)v;
    uint8_t *b = &z->ll4[i >> 1];
    *b = (i & 1) ? (uint8_t)((*b & 0x0f) | ((v >> 16) << 4)) : (uint8_t)((*b & 0xf0) | (v >> 16));
}

/* Parses one block after its 48-bit mark: tables, symbols, inverse BWT links. */
static int cbz_block(cbz *z) {
    uint32_t v;
    CBZ_GET(z->stored_crc, 32);
    CBZ_GET(v, 1);
    if (v != 0) return CBZ_UNSUPPORTED; /* randomised blocks: obsolete, left to libbz2 */
    uint32_t orig;
    CBZ_GET(orig, 24);

    uint32_t in_use16;
    CBZ_GET(in_use16, 16);
    int n_in_use = 0;
    for (int i = 0; i < 16; i++) {
        if (!(in_use16 & (0x8000u >> i))) continue;
        uint32_t in_use;
        CBZ_GET(in_use, 16);
        for (int j = 0; j < 16; j++)
            if (in_use & (0x8000u >> j)) z->seq_to_unseq[n_in_use++] = (uint8_t)(i * 16 + j);
    }
    if (n_in_use == 0) return CBZ_CORRUPT;
    int alpha = n_in_use + 2;

    uint32_t n_groups, n_selectors;
    CBZ_GET(n_groups, 3);
    if (n_groups < 2 || n_groups > CBZ_MAX_GROUPS) return CBZ_CORRUPT;
    CBZ_GET(n_selectors, 15);
    if (n_selectors < 1) return CBZ_CORRUPT;
    uint8_t pos[CBZ_MAX_GROUPS];
    for (uint32_t g = 0; g < n_groups; g++) pos[g] = (uint8_t)g;
    for (uint32_t i = 0; i < n_selectors; i++) {
        uint32_t j = 0;
        for (;;) {
            CBZ_GET(v, 1);
            if (v == 0) break;
            if (++j >= n_groups) return CBZ_CORRUPT;
        }
        if (i < CBZ_MAX_SELECTORS) { /* libbz2 reads them all, keeps 18002 */
            uint8_t t = pos[j];
            for (; j > 0; j--) pos[j] = pos[j - 1];
            pos[0] = t;
            z->selector[i] = t;
        }
    }
    if (n_selectors > CBZ_MAX_SELECTORS) n_selectors = CBZ_MAX_SELECTORS;

    for (uint32_t g = 0; g < n_groups; g++) {
        uint32_t curr;
        CBZ_GET(curr, 5);
        for (int i = 0; i < alpha; i++) {
            for (;;) {
                if (curr < 1 || curr > 20) return CBZ_CORRUPT;
                CBZ_GET(v, 1);
                if (v == 0) break;
                CBZ_GET(v, 1);
                if (v == 0)
                    curr++;
                else
                    curr--;
            }
            z->len[g][i] = (uint8_t)curr;
        }
        /* Canonical decoding tables, built exactly as libbz2 does. */
        int min_len = 32, max_len = 0;
        for (int i = 0; i < alpha; i++) {
            if (z->len[g][i] > max_len) max_len = z->len[g][i];
            if (z->len[g][i] < min_len) min_len = z->len[g][i];
        }
        int32_t *perm = z->perm[g], *base = z->base[g], *limit = z->limit[g];
        memset(perm, 0, sizeof z->perm[g]);
        int pp = 0;
        for (int l = min_len; l <= max_len; l++)
            for (int s = 0; s < alpha; s++)
                if (z->len[g][s] == l) perm[pp++] = s;
        for (int i = 0; i < CBZ_MAX_CODE_LEN; i++) base[i] = limit[i] = 0;
        for (int i = 0; i < alpha; i++) base[z->len[g][i] + 1]++;
        for (int i = 1; i < CBZ_MAX_CODE_LEN; i++) base[i] += base[i - 1];
        int32_t vec = 0;
        for (int l = min_len; l <= max_len; l++) {
            vec += base[l + 1] - base[l];
            limit[l] = vec - 1;
            vec <<= 1;
        }
        for (int l = min_len + 1; l <= max_len; l++) base[l] = ((limit[l - 1] + 1) << 1) - base[l];
        z->minlen[g] = min_len;
        /* The lookup table replays the slow decoder's steps for every
           CBZ_LUT_BITS-bit prefix, so both always agree. */
        for (uint32_t bits = 0; bits < (1u << CBZ_LUT_BITS); bits++) {
            uint16_t entry = 0;
            for (int l = min_len; l <= CBZ_LUT_BITS; l++) {
                int32_t zvec = (int32_t)(bits >> (CBZ_LUT_BITS - l));
                if (zvec > limit[l]) continue;
                int32_t at = zvec - base[l];
                if (at >= 0 && at < CBZ_MAX_ALPHA && perm[at] < alpha) entry = (uint16_t)(l << 9 | perm[at]);
                break;
            }
            z->lut[g][bits] = entry;
        }
    }

    /* Symbols: Huffman, then run lengths of the front symbol, then move-to-front. */
    uint8_t mtf[256];
    for (int i = 0; i < 256; i++) mtf[i] = (uint8_t)i;
    memset(z->unzftab, 0, sizeof z->unzftab);
    uint32_t nblock = 0, block_max = (uint32_t)z->level * 100000u;
    int eob = n_in_use + 1;
    int32_t group_no = -1, group_pos = 0;
    const int32_t *g_limit = NULL, *g_base = NULL, *g_perm = NULL;
    const uint16_t *g_lut = NULL;
    int32_t g_minlen = 0;
    uint32_t run = 0, run_weight = 1;
    int in_run = 0;
    for (;;) {
        if (group_pos == 0) {
            if (++group_no >= (int32_t)n_selectors) return CBZ_CORRUPT;
            group_pos = CBZ_GROUP_SIZE;
            int sel = z->selector[group_no];
            g_limit = z->limit[sel];
            g_base = z->base[sel];
            g_perm = z->perm[sel];
            g_minlen = z->minlen[sel];
            g_lut = z->lut[sel];
        }
        group_pos--;
        int sym = -1;
        if (z->nbits >= CBZ_LUT_BITS || cbz_need(z, CBZ_LUT_BITS) == CBZ_OK) {
            uint16_t entry = g_lut[(z->bits >> (z->nbits - CBZ_LUT_BITS)) & ((1u << CBZ_LUT_BITS) - 1)];
            if (entry != 0) {
                (void)cbz_take(z, entry >> 9);
                sym = entry & 0x1ff;
            }
        }
        if (sym < 0) { /* long code, end of input near, or corrupt: bit by bit, as libbz2 */
            int zn = g_minlen;
            uint32_t zvec;
            CBZ_GET(zvec, zn);
            for (;;) {
                if (zn > 20) return CBZ_CORRUPT;
                if ((int32_t)zvec <= g_limit[zn]) break;
                zn++;
                CBZ_GET(v, 1);
                zvec = (zvec << 1) | v;
            }
            int32_t at = (int32_t)zvec - g_base[zn];
            if (at < 0 || at >= CBZ_MAX_ALPHA) return CBZ_CORRUPT;
            sym = g_perm[at];
            if (sym >= alpha) return CBZ_CORRUPT;
        }

        if (sym <= 1) { /* RUNA / RUNB: bijective base-2 run length */
            if (!in_run) {
                in_run = 1;
                run = 0;
                run_weight = 1;
            }
            if (run_weight >= 2u * 1024 * 1024) return CBZ_CORRUPT;
            run += (uint32_t)(sym + 1) * run_weight;
            run_weight <<= 1;
            continue;
        }
        if (in_run) {
            in_run = 0;
            uint8_t uc = z->seq_to_unseq[mtf[0]];
            if (run > block_max - nblock) return CBZ_CORRUPT;
            z->unzftab[uc] += run;
            if (z->fast)
                for (uint32_t k = 0; k < run; k++) z->tt[nblock + k] = uc;
            else
                for (uint32_t k = 0; k < run; k++) z->ll16[nblock + k] = uc;
            nblock += run;
        }
        if (sym == eob) break;
        if (nblock >= block_max) return CBZ_CORRUPT;
        int nn = sym - 1; /* 1 .. n_in_use - 1 */
        uint8_t m = mtf[nn];
        memmove(mtf + 1, mtf, (size_t)nn);
        mtf[0] = m;
        uint8_t uc = z->seq_to_unseq[m];
        z->unzftab[uc]++;
        if (z->fast)
            z->tt[nblock++] = uc;
        else
            z->ll16[nblock++] = uc;
    }
    if (orig >= nblock) return CBZ_CORRUPT;

    z->cftab[0] = 0;
    for (int i = 1; i <= 256; i++) z->cftab[i] = z->cftab[i - 1] + z->unzftab[i - 1];
    uint32_t next[256];
    memcpy(next, z->cftab, sizeof next);
    z->nblock = nblock;
    if (z->fast) {
        /* Inverse BWT, libbz2's fast mode: every position gets the index of
           the one that follows it in output order, above its own symbol. */
        for (uint32_t i = 0; i < nblock; i++) z->tt[next[z->tt[i] & 0xff]++] |= i << 8;
        z->tpos = z->tt[orig] >> 8;
    } else {
        /* Inverse BWT, libbz2's small mode: links first map each position to
           its symbol's place in sorted order, then the cycle through orig is
           reversed so that following links from orig yields the output order. */
        for (uint32_t i = 0; i < nblock; i++) cbz_set_link(z, i, next[(uint8_t)z->ll16[i]]++);
        uint32_t i = orig, j = cbz_link(z, orig);
        do { /* a permutation: back at orig within nblock steps */
            uint32_t after = cbz_link(z, j);
            cbz_set_link(z, j, i);
            i = j;
            j = after;
        } while (i != orig);
        uint32_t sym = 0;
        for (uint32_t b = 0; b * 1024u < nblock; b++) {
            while (z->cftab[sym + 1] <= b * 1024u) sym++; /* cftab[256] = nblock ends it */
            z->bucket[b] = (uint8_t)sym;
        }
        z->tpos = orig;
    }
    z->used = 0;
    z->crc = 0xffffffffu;
    z->pending = 0;
    z->last = -1;
    z->run = 0;
    return CBZ_OK;
}

static void cbz_begin_raw(cbz *z) {
    cbz_seek(z, 0);
    z->state = CBZ_HEADER;
    z->piece = 0;
    z->combined = 0;
}

static void cbz_begin_piece(cbz *z, int64_t start_bit, int64_t end_bit, uint32_t crc, int level) {
    cbz_seek(z, start_bit);
    z->align_to = start_bit;
    z->state = CBZ_MARK;
    z->piece = 1;
    z->piece_end = end_bit;
    z->piece_crc = crc;
    z->level = level;
    z->combined = 0;
}

/* Skips to the exact start bit after cbz_seek (which starts at its byte). */
static int cbz_align(cbz *z, int64_t bit) {
    int skip = (int)(bit - z->bitpos);
    if (skip > 0) {
        uint32_t ignored;
        CBZ_GET(ignored, skip);
        (void)ignored;
    }
    return CBZ_OK;
}

/* Handles the part between blocks; returns CBZ_OK with state set. */
static int cbz_step(cbz *z) {
    uint32_t v, w;
    if (z->state == CBZ_HEADER) {
        CBZ_GET(v, 32);
        if ((v >> 8) != 0x425a68u || (v & 0xff) < '1' || (v & 0xff) > '9') return CBZ_UNSUPPORTED;
        z->level = (int)(v & 0xff) - '0';
        z->state = CBZ_MARK;
        return CBZ_OK;
    }
    /* CBZ_MARK */
    if (z->align_to > z->bitpos) {
        int r = cbz_align(z, z->align_to);
        if (r != CBZ_OK) return r;
    }
    if (z->piece && z->bitpos == z->piece_end) {
        z->state = CBZ_DONE;
        return CBZ_OK;
    }
    CBZ_GET(v, 24);
    CBZ_GET(w, 24);
    uint64_t mark = ((uint64_t)v << 24) | w;
    if (mark == EOS_MAGIC && !z->piece) {
        CBZ_GET(v, 32);
        if (v != z->combined) return CBZ_UNSUPPORTED; /* libbz2 will say so */
        z->state = CBZ_DONE;
        return CBZ_OK;
    }
    if (mark != BLOCK_MAGIC) return CBZ_UNSUPPORTED;
    /* Test hook: decline the Nth block this decoder meets (see cbspatch_testing_faults). */
    int decline = __atomic_load_n(&testing_decline_block, __ATOMIC_RELAXED);
    if (decline > 0 && ++z->test_blocks == decline) return CBZ_UNSUPPORTED;
    int r = cbz_block(z);
    if (r != CBZ_OK) return r;
    /* A piece must be exactly one block: a mark-like pattern inside a block
       ends or starts a piece at the wrong place, which shows here, before
       any output, so the stream can still be decoded the slow way. */
    if (z->piece && (z->bitpos != z->piece_end || z->stored_crc != z->piece_crc)) return CBZ_UNSUPPORTED;
    z->state = CBZ_OUTPUT;
    return CBZ_OK;
}

/* Expands the current block into out[*n..cap) and runs the block CRC over
   it; returns 1 when the block is complete. */
static int cbz_output(cbz *z, uint8_t *out, size_t cap, size_t *n) {
    size_t k = *n, crc_from = k;
    const uint32_t *cftab = z->cftab;
    const uint8_t *bucket = z->bucket;
    const uint32_t *tt = z->fast ? z->tt : NULL;
    uint32_t tpos = z->tpos, used = z->used, nblock = z->nblock, crc = z->crc;
    int last = z->last, run = z->run;
    for (;;) {
        if (z->pending > 0) {
            size_t room = cap - k;
            size_t m = z->pending < room ? z->pending : room;
            memset(out + k, z->pending_ch, m);
            if (m == CRC_ZERO_RUN && z->pending_ch == 0) {
                crc = crc_update(crc, out + crc_from, k - crc_from);
                crc = crc_after_zero_run(crc);
                crc_from = k + m;
            }
            k += m;
            z->pending -= (uint32_t)m;
            if (z->pending > 0) break;
        }
        if (used == nblock) break;
        if (k == cap) break;
        /* Literal symbols until the output is full, the block ends, or a run
           count follows four equal bytes. */
        while (used < nblock && k < cap) {
            uint8_t c;
            if (tt != NULL) {
                tpos = tt[tpos];
                c = (uint8_t)(tpos & 0xff);
                tpos >>= 8;
            } else {
                /* tpos < nblock = cftab[256], so the search stops by symbol 255 */
                uint32_t sym = bucket[tpos >> 10];
                while (cftab[sym + 1] <= tpos) sym++;
                c = (uint8_t)sym;
                tpos = cbz_link(z, tpos);
            }
            used++;
            if (run == 4) {
                z->pending = c;
                z->pending_ch = (uint8_t)last;
                run = 0;
                last = -1;
                break;
            }
            out[k++] = c;
            if (c == last)
                run++;
            else {
                last = c;
                run = 1;
            }
        }
    }
    z->crc = crc_update(crc, out + crc_from, k - crc_from);
    z->tpos = tpos;
    z->used = used;
    z->last = last;
    z->run = run;
    *n = k;
    return used == nblock && z->pending == 0;
}

/* Decodes into out[0..capacity); DECODE_MORE / DECODE_END / DECODE_ERROR.
   On error *before_output says whether the failing block had produced nothing. */
static int cbz_run(cbz *z, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status, char *message,
                   int *before_output) {
    size_t n = 0;
    *before_output = 1;
    while (n < capacity) {
        if (z->state == CBZ_DONE) break;
        if (z->state == CBZ_OUTPUT) {
            int complete = cbz_output(z, out, capacity, &n);
            if (!complete) continue;
            uint32_t crc = ~z->crc;
            if (crc != z->stored_crc) {
                *produced = n;
                *before_output = 0;
                *status = CBSPATCH_ERR_BZIP2;
                snprintf(message, MSG_SIZE, "%s stream: bzip2 data error (block CRC mismatch)", z->name);
                return DECODE_ERROR;
            }
            if (z->run == 4) { /* four equal bytes with no count after them */
                *produced = n;
                *before_output = 0;
                *status = CBSPATCH_ERR_BZIP2;
                snprintf(message, MSG_SIZE, "%s stream: bzip2 data error (block ends inside a run)", z->name);
                return DECODE_ERROR;
            }
            z->combined = ((z->combined << 1) | (z->combined >> 31)) ^ crc;
            z->state = CBZ_MARK;
            continue;
        }
        int r = cbz_step(z);
        if (r != CBZ_OK) {
            *produced = n;
            *status = r == CBZ_IO ? CBSPATCH_ERR_IO : CBSPATCH_ERR_BZIP2;
            if (r == CBZ_IO)
                snprintf(message, MSG_SIZE, "reading the %s stream: %s", z->name,
                         errno != 0 ? strerror(errno) : "short read");
            else
                snprintf(message, MSG_SIZE, "%s stream: not decodable by the fast path (%s)", z->name,
                         r == CBZ_SHORT ? "truncated" : r == CBZ_CORRUPT ? "corrupt" : "unusual");
            return DECODE_ERROR;
        }
    }
    *produced = n;
    if (z->state == CBZ_DONE) {
        if (z->piece && z->bitpos != z->piece_end) {
            *status = CBSPATCH_ERR_BZIP2;
            snprintf(message, MSG_SIZE, "%s stream: block does not end at the next mark", z->name);
            return DECODE_ERROR; /* bytes went out, but were CRC-checked */
        }
        return DECODE_END;
    }
    return DECODE_MORE;
}

/* ------------------------------------------------------------------------ */
/* Streams: each bzip2 stream is decoded ahead by its own worker thread(s)   */
/* into rings of fixed slots that the main thread reads in order.            */
/*                                                                          */
/* With one worker, the worker decodes the stream as it is ("raw"). With     */
/* more, the stream is split into its bzip2 blocks by finding the 48-bit     */
/* block marks, and each worker claims the next block ("piece"), decodes it  */
/* with cbz into its own ring, and claims another; the main thread reads     */
/* pieces in order from whichever ring holds them. If cbz declines a block   */
/* (or a split turns out wrong: a mark-like bit pattern inside a block, a    */
/* CRC that does not add up) before any of its output was used, the main    */
/* thread stops the workers and has libbz2 decode the rest of the stream,   */
/* sequentially, as the reference would: cbz and splitting only ever change */
/* speed, never the result.                                                 */
/*                                                                          */
/* Deadlock freedom: a worker only waits for room in its own ring (or the   */
/* prefetch ring), which the main thread drains in order, and publishes     */
/* everything the main thread could need before it waits.                   */

#define MAX_WORKERS 4
#define PIECE_WINDOW 64 /* pieces claimed ahead of the one being read */

#define SLOT_LAST 1u  /* last slot of a piece */
#define SLOT_ERROR 2u /* the piece failed; see the worker's status */

typedef struct stream stream;

typedef struct {
    stream *st;
    unsigned index;
    pthread_t thread;
    int thread_started;
    bz_arena arena; /* cbz's block array; libbz2's memory after a fall-back */
    cbz *z;
    decoder dec;    /* only its settings and input buffer until a fall-back */
    uint8_t *slots; /* nslots * SLOT_SIZE */
    size_t *fill;
    uint8_t *flags;
    unsigned nslots;
    unsigned slots_touched; /* slots [0, slots_touched) have been written (worker only) */
    int decoded;            /* finished at least one piece (worker only) */
    size_t touched_to;      /* arena bytes below this were touched while idle (worker only) */
    /* Under st->mutex. */
    unsigned head, count;
    cbspatch_status status;
    char message[MSG_SIZE];
    int may_fall_back;
} worker;

struct stream {
    const char *name;
    int fd;
    int64_t offset, length;
    unsigned nworkers;
    int touch_arena;
    struct prefetch_s *pf; /* control stream only: old bytes read ahead */
    worker workers[MAX_WORKERS];

    pthread_mutex_t mutex;
    pthread_cond_t changed;
    pthread_mutex_t claim_mutex; /* one claim (and scan) at a time, in order */
    int sync_ready;

    /* Under mutex. */
    int cancel;
    uint64_t next_piece;
    int no_more_pieces;
    uint64_t piece_total;
    unsigned char owner[PIECE_WINDOW];
    uint64_t cur_piece; /* also read by claiming workers */

    /* Scanner (under claim_mutex). */
    int scan_started, at_eos, level;
    int64_t scan_bit;
    uint32_t combined_crc;
    uint8_t *scan_buffer; /* SCAN_CHUNK + 16 */

    /* Consumer (main thread only). */
    int cur_worker;
    const uint8_t *cursor;
    size_t available;
    int holding;
    uint64_t delivered;

    /* Sequential fallback (main thread only). */
    int fallback, fallback_done;
    decoder fb;
    uint8_t *fb_out;
    cbspatch_status fb_status;
    char fb_message[MSG_SIZE];
};

typedef struct {
    int raw, anomaly;
    int64_t start_bit, end_bit;
    uint32_t crc;
    int level;
    char message[MSG_SIZE];
} piece_job;

/* ------------------------------------------------------------------------ */
/* Control triples and the old-file prefetch.                                */

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
static triple_verdict triple_check(int64_t newpos, int64_t oldpos, int64_t x, int64_t y, int64_t z,
                                   int64_t new_size, int64_t old_size, int64_t *next_new, int64_t *next_old) {
    int64_t after_x, after_y, old_after_x = oldpos;
    if (x < 0) return TRIPLE_NEGATIVE_X;
    if (y < 0) return TRIPLE_NEGATIVE_Y;
    if (__builtin_add_overflow(newpos, x, &after_x)) return TRIPLE_X_OVERFLOW;
    if (after_x > new_size) return TRIPLE_X_PAST_NEW;
    if (__builtin_add_overflow(after_x, y, &after_y)) return TRIPLE_Y_OVERFLOW;
    if (after_y > new_size) return TRIPLE_Y_PAST_NEW;
    if (x > 0) {
        /* The reference reads out-of-range old bytes as 0 (and crashes on a
           negative cursor); bsdiff never emits such reads, so refuse them. */
        if (oldpos < 0) return TRIPLE_OLD_BEFORE_START;
        if (__builtin_add_overflow(oldpos, x, &old_after_x)) return TRIPLE_OLD_OVERFLOW;
        if (old_after_x > old_size) return TRIPLE_OLD_PAST_END;
    }
    if (__builtin_add_overflow(old_after_x, z, next_old)) return TRIPLE_Z_OVERFLOW;
    *next_new = after_y;
    return TRIPLE_OK;
}

/* The old bytes each triple adds to, read ahead by the control stream's worker
   (which has the triples first and is otherwise idle) into a ring of slots:
   bsdiff matches are short and scattered all over old, so these are thousands
   of small preads that would otherwise sit on the main thread. The main
   thread takes the bytes in order; when the prefetch stops (the control
   stream fell back to libbz2, or the triples went wrong) it reads old itself.
   Shares the control stream's mutex and condition. */
#ifndef CBSPATCH_PREFETCH_SLOTS
#define CBSPATCH_PREFETCH_SLOTS 4
#endif
#define PREFETCH_SLOTS CBSPATCH_PREFETCH_SLOTS

typedef struct prefetch_s {
    /* Under the control stream's mutex. */
    unsigned head, count;
    size_t fill[PREFETCH_SLOTS];
    int done;
    cbspatch_status status;
    char message[MSG_SIZE];
    /* Producer (control worker) only. */
    uint8_t *slots; /* PREFETCH_SLOTS * SLOT_SIZE */
    int fd;
    int64_t new_size, old_size, newpos, oldpos;
    int stopped;
    int finished; /* prefetch_finish ran */
    uint8_t partial[24];
    size_t partial_len;
    int64_t (*reads)[2]; /* (position, length) of the reads of one control slot */
    size_t nreads;
    int slot;
    size_t slot_fill;
    unsigned slots_touched;
    /* Consumer (main thread) only. */
    const uint8_t *cursor;
    size_t available;
    int holding, abandoned;
} prefetch;

#define PREFETCH_READS (SLOT_SIZE / 24 + 2)

/* Parses control bytes (before they are published) into the reads they imply. */
static void prefetch_parse(prefetch *pf, const uint8_t *bytes, size_t n) {
    while (n > 0 && !pf->stopped) {
        size_t k = 24 - pf->partial_len < n ? 24 - pf->partial_len : n;
        memcpy(pf->partial + pf->partial_len, bytes, k);
        pf->partial_len += k;
        bytes += k;
        n -= k;
        if (pf->partial_len < 24) break;
        pf->partial_len = 0;
        if (pf->newpos >= pf->new_size) { /* the main thread stops reading triples here */
            pf->stopped = 1;
            break;
        }
        int64_t x = offtin(pf->partial), y = offtin(pf->partial + 8), z = offtin(pf->partial + 16);
        int64_t next_new, next_old;
        if (triple_check(pf->newpos, pf->oldpos, x, y, z, pf->new_size, pf->old_size, &next_new, &next_old) !=
            TRIPLE_OK) {
            pf->stopped = 1; /* the main thread refuses this triple itself */
            break;
        }
        if (x > 0) {
            pf->reads[pf->nreads][0] = pf->oldpos;
            pf->reads[pf->nreads][1] = x;
            pf->nreads++;
        }
        pf->newpos = next_new;
        pf->oldpos = next_old;
    }
}

static void prefetch_publish(stream *st, prefetch *pf) {
    if ((unsigned)pf->slot + 1 > pf->slots_touched) pf->slots_touched = (unsigned)pf->slot + 1;
    pthread_mutex_lock(&st->mutex);
    pf->fill[pf->slot] = pf->slot_fill;
    pf->count++;
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
    pf->slot = -1;
    pf->slot_fill = 0;
}

static void prefetch_finish(stream *st, prefetch *pf);

/* Performs the parsed reads into the ring; returns -1 when cancelled.
   Parsing may have stopped at a later triple of the same control slot, but the
   reads of the triples before it are still done: the main thread needs them
   before it meets (and refuses) that triple. */
static int prefetch_read(stream *st, prefetch *pf) {
    int failed = 0;
    for (size_t i = 0; i < pf->nreads && !failed; i++) {
        int64_t pos = pf->reads[i][0], left = pf->reads[i][1];
        while (left > 0) {
            if (pf->slot < 0) {
                pthread_mutex_lock(&st->mutex);
                while (pf->count == PREFETCH_SLOTS && !st->cancel) pthread_cond_wait(&st->changed, &st->mutex);
                int cancelled = st->cancel;
                pf->slot = (int)((pf->head + pf->count) % PREFETCH_SLOTS);
                pthread_mutex_unlock(&st->mutex);
                if (cancelled) return -1;
            }
            size_t room = SLOT_SIZE - pf->slot_fill;
            size_t want = left < (int64_t)room ? (size_t)left : room;
            uint8_t *dst = pf->slots + (size_t)pf->slot * SLOT_SIZE + pf->slot_fill;
            ssize_t got = pread_full(pf->fd, dst, want, pos);
            if (got != (ssize_t)want) {
                pthread_mutex_lock(&st->mutex);
                pf->status = CBSPATCH_ERR_IO;
                if (got < 0)
                    snprintf(pf->message, MSG_SIZE, "reading old at %lld: %s", (long long)pos, strerror(errno));
                else
                    snprintf(pf->message, MSG_SIZE, "old file shrank while patching (short read at %lld)",
                             (long long)pos);
                pthread_mutex_unlock(&st->mutex);
                pf->stopped = 1;
                failed = 1;
                break;
            }
            pf->slot_fill += want;
            pos += (int64_t)want;
            left -= (int64_t)want;
            if (pf->slot_fill == SLOT_SIZE) prefetch_publish(st, pf);
        }
    }
    pf->nreads = 0;
    /* Publish the partial slot too: the worker may block on its control ring
       next, and the reader must not wait for these bytes meanwhile. */
    if (pf->slot >= 0 && pf->slot_fill > 0) prefetch_publish(st, pf);
    /* Nothing more will come: say so now. Waiting for the end of the control
       stream instead could deadlock, as its worker may wait for ring room that
       only the main thread, waiting in old_fetch for these bytes, would make. */
    if (pf->stopped) prefetch_finish(st, pf);
    return 0;
}

/* Publishes what is left and tells the reader there is no more (once). */
static void prefetch_finish(stream *st, prefetch *pf) {
    if (pf->finished) return;
    pf->finished = 1;
    if (pf->slot >= 0 && pf->slot_fill > 0) prefetch_publish(st, pf);
    if (pf->slots_touched < PREFETCH_SLOTS) /* never used, so free to touch: see worker_main */
        touch_pages(pf->slots + (size_t)pf->slots_touched * SLOT_SIZE,
                    (size_t)(PREFETCH_SLOTS - pf->slots_touched) * SLOT_SIZE);
    pthread_mutex_lock(&st->mutex);
    pf->done = 1;
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
}

/* Byte 1 of a 64-bit window tells which of the 8 bit offsets in byte 0 could
   start a block (bits 0-7) or end-of-stream (bits 8-15) mark. */
static uint16_t magic_filter[256];
static pthread_once_t magic_filter_once = PTHREAD_ONCE_INIT;

static void magic_filter_build(void) {
    for (int r = 0; r < 8; r++) {
        magic_filter[(BLOCK_MAGIC >> (32 + r)) & 0xff] |= (uint16_t)(1u << r);
        magic_filter[(EOS_MAGIC >> (32 + r)) & 0xff] |= (uint16_t)(1u << (8 + r));
    }
}

/* Finds the first block or end-of-stream mark starting at a bit in [from, limit].
   Returns 1 (found; *kind 0 = block, 1 = end) or 0 (none) or -1 (I/O error). */
static int find_mark(stream *st, int64_t from, int64_t limit, int64_t *found, int *kind) {
    int64_t byte = from / 8;
    int64_t region = st->length;
    while (byte * 8 <= limit) {
        size_t want = SCAN_CHUNK + 8;
        if (byte + (int64_t)want > region) want = (size_t)(region - byte);
        ssize_t got = pread_full(st->fd, st->scan_buffer, want, st->offset + byte);
        if (got != (ssize_t)want) return -1;
        memset(st->scan_buffer + want, 0, SCAN_CHUNK + 16 - want); /* the tail's windows read zeros */
        size_t usable = want > 8 ? want - 8 : 0;                  /* windows that fit in what was read... */
        if (byte + (int64_t)want == region) usable = want;        /* ...or the region's tail */
        const uint8_t *b = st->scan_buffer;
        for (size_t i = 0; i < usable; i++) {
            uint16_t m = magic_filter[b[i + 1]];
            if (m == 0) continue;
            uint64_t w = 0;
            for (int j = 0; j < 8; j++) w = (w << 8) | b[i + (size_t)j];
            for (int r = 0; r < 8; r++) {
                int is_block = (m >> r) & 1, is_end = (m >> (8 + r)) & 1;
                if (!is_block && !is_end) continue;
                int64_t at = (byte + (int64_t)i) * 8 + r;
                if (at < from || at > limit) continue;
                if (at + 48 > region * 8) continue; /* must fit in the region, so padding never matches */
                uint64_t v = (w >> (16 - r)) & UINT64_C(0xffffffffffff);
                if (is_block && v == BLOCK_MAGIC) {
                    *found = at;
                    *kind = 0;
                    return 1;
                }
                if (is_end && v == EOS_MAGIC) {
                    *found = at;
                    *kind = 1;
                    return 1;
                }
            }
        }
        if (usable == 0 || byte + (int64_t)want >= region) break;
        byte += (int64_t)usable;
    }
    return 0;
}

enum { SCAN_PIECE, SCAN_END, SCAN_ANOMALY, SCAN_IO };

/* Locates the next block of the stream (called under claim_mutex). */
static int stream_scan(stream *st, piece_job *job) {
    uint64_t v;
    if (!st->scan_started) {
        st->scan_started = 1;
        if (region_bits(st->fd, st->offset, st->length, 0, 32, &v) != 0 || (v >> 8) != 0x425a68u /* "BZh" */ ||
            (v & 0xff) < '1' || (v & 0xff) > '9') {
            snprintf(job->message, MSG_SIZE, "%s stream: no bzip2 header to split at", st->name);
            return SCAN_ANOMALY;
        }
        st->level = (int)(v & 0xff) - '0';
        st->scan_bit = 32;
        if (region_bits(st->fd, st->offset, st->length, 32, 48, &v) != 0 || (v != BLOCK_MAGIC && v != EOS_MAGIC)) {
            snprintf(job->message, MSG_SIZE, "%s stream: no bzip2 block after the header", st->name);
            return SCAN_ANOMALY;
        }
        st->at_eos = v == EOS_MAGIC;
    }
    if (st->at_eos) {
        if (region_bits(st->fd, st->offset, st->length, st->scan_bit + 48, 32, &v) != 0 ||
            (uint32_t)v != st->combined_crc) {
            snprintf(job->message, MSG_SIZE, "%s stream: combined CRC does not match its blocks", st->name);
            return SCAN_ANOMALY;
        }
        return SCAN_END;
    }
    if (region_bits(st->fd, st->offset, st->length, st->scan_bit + 48, 32, &v) != 0) {
        snprintf(job->message, MSG_SIZE, "%s stream: cut inside a block header", st->name);
        return SCAN_ANOMALY;
    }
    uint32_t crc = (uint32_t)v;
    /* A block holds at most level*100000 symbols of at most 20 bits, plus tables. */
    int64_t longest = ((int64_t)st->level * 100000 + 1) * 20 + 64 * 1024 * 8;
    int64_t limit = st->scan_bit + longest;
    if (limit > st->length * 8 - 48) limit = st->length * 8 - 48;
    int64_t found = 0;
    int kind = 0;
    int r = find_mark(st, st->scan_bit + 80, limit, &found, &kind);
    if (r < 0) {
        snprintf(job->message, MSG_SIZE, "reading the %s stream: %s", st->name,
                 errno != 0 ? strerror(errno) : "short read");
        return SCAN_IO;
    }
    if (r == 0) {
        snprintf(job->message, MSG_SIZE, "%s stream: no bzip2 block boundary where one must be", st->name);
        return SCAN_ANOMALY;
    }
    /* Test hook: end the second piece one bit early, as a mark-like bit
       pattern inside a block would (see cbspatch_testing_faults). */
    if (st->next_piece == 1 && kind == 0 && __atomic_load_n(&testing_fake_split, __ATOMIC_RELAXED)) found -= 1;
    job->start_bit = st->scan_bit;
    job->end_bit = found;
    job->crc = crc;
    job->level = st->level;
    st->combined_crc = ((st->combined_crc << 1) | (st->combined_crc >> 31)) ^ crc;
    st->scan_bit = found;
    st->at_eos = kind == 1;
    return SCAN_PIECE;
}

/* Takes the next piece for worker w; returns 0 with a job, or 1 when there is nothing more to do. */
static int stream_claim(stream *st, worker *w, piece_job *job) {
    memset(job, 0, sizeof *job);
    pthread_mutex_lock(&st->claim_mutex);
    pthread_mutex_lock(&st->mutex);
    while (!st->cancel && !st->no_more_pieces && st->next_piece >= st->cur_piece + PIECE_WINDOW)
        pthread_cond_wait(&st->changed, &st->mutex);
    int stop = st->cancel || st->no_more_pieces;
    pthread_mutex_unlock(&st->mutex);
    if (stop) {
        pthread_mutex_unlock(&st->claim_mutex);
        return 1;
    }
    int scan = SCAN_PIECE;
    if (st->nworkers == 1)
        job->raw = 1;
    else
        scan = stream_scan(st, job);
    pthread_mutex_lock(&st->mutex);
    if (job->raw) {
        st->no_more_pieces = 1;
        st->piece_total = st->next_piece + 1;
    } else if (scan == SCAN_END) {
        st->no_more_pieces = 1;
        st->piece_total = st->next_piece;
    } else if (scan != SCAN_PIECE) {
        /* The piece becomes an error that the reader meets in order. */
        job->anomaly = scan == SCAN_ANOMALY ? 1 : 2;
        st->no_more_pieces = 1;
        st->piece_total = st->next_piece + 1;
    }
    if (scan != SCAN_END) {
        st->owner[st->next_piece % PIECE_WINDOW] = (unsigned char)w->index;
        st->next_piece++;
    }
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
    pthread_mutex_unlock(&st->claim_mutex);
    return scan == SCAN_END ? 1 : 0;
}

/* Touches (see worker_main) a little more of the block array beyond what the
   block being output uses, instead of sleeping; returns 0 when done. Only
   the fast layout, whose one array is filled from the start, is simple
   enough; the next block rewrites whatever it uses before reading it. */
static int worker_idle_touch(worker *w) {
    if (!w->st->touch_arena || w->index != 0 || !w->z->fast) return 0;
    size_t from = ((size_t)w->z->nblock * 4 + 4095) & ~(size_t)4095;
    if (from < w->touched_to) from = w->touched_to;
    if (from >= w->arena.size) return 0;
    size_t n = w->arena.size - from < 256 * 1024 ? w->arena.size - from : 256 * 1024;
    touch_pages(w->arena.base + from, n);
    w->touched_to = from + n;
    return 1;
}

/* Waits for a free slot; returns its index, or -1 when cancelled. */
static int worker_slot(worker *w) {
    stream *st = w->st;
    pthread_mutex_lock(&st->mutex);
    while (w->count == w->nslots && !st->cancel) {
        pthread_mutex_unlock(&st->mutex);
        int touched = worker_idle_touch(w);
        pthread_mutex_lock(&st->mutex);
        if (!touched && w->count == w->nslots && !st->cancel) pthread_cond_wait(&st->changed, &st->mutex);
    }
    int slot = st->cancel ? -1 : (int)((w->head + w->count) % w->nslots);
    pthread_mutex_unlock(&st->mutex);
    return slot;
}

static void worker_publish(worker *w, int slot, size_t fill, unsigned flags) {
    stream *st = w->st;
    if ((unsigned)slot + 1 > w->slots_touched) w->slots_touched = (unsigned)slot + 1;
    pthread_mutex_lock(&st->mutex);
    w->fill[slot] = fill;
    w->flags[slot] = (uint8_t)flags;
    w->count++;
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    stream *st = w->st;
    cbz *z = w->z;
    prefetch *pf = st->pf;
    piece_job job;
    while (stream_claim(st, w, &job) == 0) {
        cbspatch_status status = CBSPATCH_OK;
        char message[MSG_SIZE];
        message[0] = '\0';
        int result = DECODE_END, may_fall_back = 0;
        int slot = worker_slot(w);
        if (slot < 0) return NULL;
        size_t fill = 0;
        if (job.anomaly) {
            status = job.anomaly == 1 ? CBSPATCH_ERR_BZIP2 : CBSPATCH_ERR_IO;
            memcpy(message, job.message, MSG_SIZE);
            result = DECODE_ERROR;
            may_fall_back = job.anomaly == 1;
        } else {
            if (job.raw)
                cbz_begin_raw(z);
            else
                cbz_begin_piece(z, job.start_bit, job.end_bit, job.crc, job.level);
            for (;;) {
                size_t produced = 0;
                int before_output = 1;
                uint8_t *out = w->slots + (size_t)slot * SLOT_SIZE;
                result = cbz_run(z, out, SLOT_SIZE, &produced, &status, message, &before_output);
                fill = produced;
                if (result == DECODE_ERROR) {
                    /* Everything before the failing block was CRC-checked; if
                       that block gave nothing yet, libbz2 can take over. */
                    may_fall_back = before_output && status != CBSPATCH_ERR_IO;
                    break;
                }
                if (result != DECODE_MORE) break;
                /* Triples are parsed before the slot is published (the reader
                   may recycle it at once) and read after (the reader needs
                   them to take the old bytes: the other order could deadlock). */
                if (pf != NULL) prefetch_parse(pf, out, fill);
                worker_publish(w, slot, fill, 0);
                if (pf != NULL && prefetch_read(st, pf) < 0) return NULL;
                fill = 0;
                slot = worker_slot(w);
                if (slot < 0) return NULL;
            }
        }
        if (pf != NULL) prefetch_parse(pf, w->slots + (size_t)slot * SLOT_SIZE, fill);
        if (result == DECODE_ERROR) {
            pthread_mutex_lock(&st->mutex);
            w->status = status;
            memcpy(w->message, message, MSG_SIZE);
            w->may_fall_back = may_fall_back;
            pthread_mutex_unlock(&st->mutex);
            worker_publish(w, slot, fill, SLOT_LAST | SLOT_ERROR);
            if (pf != NULL && prefetch_read(st, pf) == 0) prefetch_finish(st, pf);
            return NULL;
        }
        worker_publish(w, slot, fill, SLOT_LAST);
        if (pf != NULL && prefetch_read(st, pf) < 0) return NULL;
        w->decoded = 1;
    }
    if (pf != NULL) prefetch_finish(st, pf);
    if (w->decoded) {
        /* Memory use should not depend on the package: how much of a ring or
           block array a stream uses depends on its length (a small package
           fills none). A worker that decoded a stream touches its slots that
           were never used once done (the others may still hold data), and the
           extra stream's first worker its whole block array: that evens out
           what small and large packages use, on time that is otherwise idle. */
        if (st->touch_arena && w->index == 0) touch_pages(w->arena.base, w->arena.size);
        if (w->slots_touched < w->nslots)
            touch_pages(w->slots + (size_t)w->slots_touched * SLOT_SIZE,
                        (size_t)(w->nslots - w->slots_touched) * SLOT_SIZE);
    }
    return NULL;
}

static void stream_stop_workers(stream *st) {
    if (!st->sync_ready) return;
    pthread_mutex_lock(&st->mutex);
    st->cancel = 1;
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
    for (unsigned i = 0; i < st->nworkers; i++) {
        if (st->workers[i].thread_started) pthread_join(st->workers[i].thread, NULL);
        st->workers[i].thread_started = 0;
    }
}

/* Stops the workers and frees everything; safe on a partly started stream. */
static void stream_destroy(stream *st) {
    stream_stop_workers(st);
    decoder_end(&st->fb);
    for (unsigned i = 0; i < st->nworkers; i++) {
        worker *w = &st->workers[i];
        decoder_end(&w->dec);
        arena_destroy(&w->arena);
        free(w->z);
        w->z = NULL;
        free(w->dec.input);
        free(w->slots);
        free(w->fill);
        free(w->flags);
        w->dec.input = NULL;
        w->slots = NULL;
        w->fill = NULL;
        w->flags = NULL;
    }
    free(st->scan_buffer);
    free(st->fb_out);
    st->scan_buffer = NULL;
    st->fb_out = NULL;
    if (st->sync_ready) {
        pthread_cond_destroy(&st->changed);
        pthread_mutex_destroy(&st->claim_mutex);
        pthread_mutex_destroy(&st->mutex);
        st->sync_ready = 0;
    }
}


static cbspatch_status stream_start(stream *st, const char *name, int fd, int64_t offset, int64_t length,
                                    unsigned nworkers, unsigned nslots, unsigned fast_workers, int touch_arena,
                                    prefetch *pf, cbspatch_error *error) {
    memset(st, 0, sizeof *st);
    if (nworkers < 1) nworkers = 1;
    if (nworkers > MAX_WORKERS) nworkers = MAX_WORKERS;
    if (nslots < 2) nslots = 2;
    st->name = name;
    st->fd = fd;
    st->offset = offset;
    st->length = length;
    st->nworkers = nworkers;
    st->touch_arena = touch_arena;
    st->pf = pf;
    st->cur_worker = -1;
    if (pthread_mutex_init(&st->mutex, NULL) != 0)
        return fail(error, CBSPATCH_ERR_NOMEM, "cannot create a mutex for the %s stream", name);
    if (pthread_mutex_init(&st->claim_mutex, NULL) != 0) {
        pthread_mutex_destroy(&st->mutex);
        return fail(error, CBSPATCH_ERR_NOMEM, "cannot create a mutex for the %s stream", name);
    }
    if (pthread_cond_init(&st->changed, NULL) != 0) {
        pthread_mutex_destroy(&st->claim_mutex);
        pthread_mutex_destroy(&st->mutex);
        return fail(error, CBSPATCH_ERR_NOMEM, "cannot create a condition for the %s stream", name);
    }
    st->sync_ready = 1;
    pthread_once(&crc_tables_once, crc_tables_build);
    if (nworkers > 1) {
        pthread_once(&magic_filter_once, magic_filter_build);
        st->scan_buffer = malloc(SCAN_CHUNK + 16);
        if (st->scan_buffer == NULL) return fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream", name);
    }
    for (unsigned i = 0; i < nworkers; i++) {
        worker *w = &st->workers[i];
        w->st = st;
        w->index = i;
        w->nslots = nslots;
        w->dec.name = name;
        w->dec.fd = fd;
        w->dec.region_offset = offset;
        w->dec.region_length = length;
        w->dec.arena = &w->arena;
        w->dec.input = malloc(INPUT_CHUNK);
        w->slots = malloc((size_t)nslots * SLOT_SIZE);
        w->fill = calloc(nslots, sizeof *w->fill);
        w->flags = calloc(nslots, 1);
        w->z = malloc(sizeof *w->z);
        int fast = i < fast_workers;
        if (w->dec.input == NULL || w->slots == NULL || w->fill == NULL || w->flags == NULL || w->z == NULL ||
            arena_init(&w->arena, fast) != 0)
            return fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream buffers", name);
        memset(w->z, 0, sizeof *w->z);
        w->z->name = name;
        w->z->fd = fd;
        w->z->region_offset = offset;
        w->z->region_length = length;
        w->z->in = w->dec.input;
        w->z->fast = fast;
        w->z->tt = (uint32_t *)(void *)w->arena.base;
        w->z->ll16 = (uint16_t *)(void *)w->arena.base;
        w->z->ll4 = w->arena.base + (size_t)CBZ_BLOCK_MAX * 2;
    }
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return fail(error, CBSPATCH_ERR_NOMEM, "cannot create thread attributes for the %s stream", name);
    size_t stack = THREAD_STACK;
#ifdef PTHREAD_STACK_MIN
    if (stack < (size_t)PTHREAD_STACK_MIN) stack = (size_t)PTHREAD_STACK_MIN;
#endif
    (void)pthread_attr_setstacksize(&attr, stack); /* a hint: the default also works */
    for (unsigned i = 0; i < nworkers; i++) {
        int ret = pthread_create(&st->workers[i].thread, &attr, worker_main, &st->workers[i]);
        if (ret != 0) {
            pthread_attr_destroy(&attr);
            return fail(error, CBSPATCH_ERR_NOMEM, "cannot start a %s stream decoder thread: %s", name,
                        strerror(ret));
        }
        st->workers[i].thread_started = 1;
    }
    pthread_attr_destroy(&attr);
    return CBSPATCH_OK;
}

/* Internal result of stream_peek when the stream ended cleanly with nothing left;
   the caller turns it into a message that says what was still needed. */
#define STREAM_EOF (-1)

/* The split went wrong: stop the workers, decode from the start of the stream
   in this thread and skip what was already delivered. */
static int stream_fall_back(stream *st, cbspatch_error *error) {
    stream_stop_workers(st);
    st->fallback = 1;
    worker *w0 = &st->workers[0];
    decoder_end(&w0->dec); /* workers end their decoders, but be sure */
    st->fb = w0->dec;      /* reuses worker 0's arena and input buffer */
    st->fb.ready = 0;
    st->fb_out = malloc(SLOT_SIZE);
    cbspatch_status status = CBSPATCH_OK;
    char message[MSG_SIZE];
    if (st->fb_out == NULL) return fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream", st->name);
    if (decoder_begin(&st->fb, &status, message) != 0) return fail(error, status, "%s", message);
    uint64_t skip = st->delivered;
    while (skip > 0) {
        size_t want = skip < SLOT_SIZE ? (size_t)skip : (size_t)SLOT_SIZE, produced = 0;
        int r = decoder_run(&st->fb, st->fb_out, want, &produced, &status, message);
        if (r == DECODE_ERROR) return fail(error, status, "%s", message);
        skip -= produced;
        if (r == DECODE_END && skip > 0)
            return fail(error, CBSPATCH_ERR_BZIP2, "%s stream decodes differently on a second pass", st->name);
        if (r == DECODE_END) st->fallback_done = 1;
    }
    st->holding = 0;
    st->available = 0;
    return CBSPATCH_OK;
}

static int stream_fallback_peek(stream *st, cbspatch_error *error) {
    for (;;) {
        if (st->fb_status != CBSPATCH_OK) return fail(error, st->fb_status, "%s", st->fb_message);
        if (st->fallback_done) return STREAM_EOF;
        cbspatch_status status = CBSPATCH_OK;
        size_t produced = 0;
        int r = decoder_run(&st->fb, st->fb_out, SLOT_SIZE, &produced, &status, st->fb_message);
        if (r == DECODE_END) st->fallback_done = 1;
        if (r == DECODE_ERROR) st->fb_status = status; /* reported once the bytes before it are used */
        if (produced > 0) {
            st->cursor = st->fb_out;
            st->available = produced;
            st->holding = 1;
            return CBSPATCH_OK;
        }
    }
}

/* Makes at least one byte available at st->cursor, waiting for the workers.
   Returns CBSPATCH_OK, STREAM_EOF, or an error status (with message). */
static int stream_peek(stream *st, cbspatch_error *error) {
    if (st->holding && st->available > 0) return CBSPATCH_OK;
    if (st->fallback) return stream_fallback_peek(st, error);
    pthread_mutex_lock(&st->mutex);
    for (;;) {
        if (st->holding) {
            worker *w = &st->workers[st->cur_worker];
            unsigned flags = w->flags[w->head];
            w->head = (w->head + 1) % w->nslots;
            w->count--;
            st->holding = 0;
            pthread_cond_broadcast(&st->changed);
            if (flags & SLOT_ERROR) {
                int fall_back = w->may_fall_back;
                cbspatch_status status = w->status;
                if (!fall_back && error != NULL) memcpy(error->message, w->message, MSG_SIZE);
                pthread_mutex_unlock(&st->mutex);
                if (!fall_back) return (int)status;
                int r = stream_fall_back(st, error);
                if (r != CBSPATCH_OK) return r;
                return stream_fallback_peek(st, error);
            }
            if (flags & SLOT_LAST) {
                st->cur_piece++;
                st->cur_worker = -1;
                pthread_cond_broadcast(&st->changed);
            }
        }
        if (st->cur_worker < 0) {
            if (st->no_more_pieces && st->cur_piece >= st->piece_total) {
                pthread_mutex_unlock(&st->mutex);
                return STREAM_EOF;
            }
            if (st->cur_piece < st->next_piece) {
                st->cur_worker = st->owner[st->cur_piece % PIECE_WINDOW];
            } else {
                pthread_cond_wait(&st->changed, &st->mutex);
                continue;
            }
        }
        worker *w = &st->workers[st->cur_worker];
        if (w->count == 0) {
            pthread_cond_wait(&st->changed, &st->mutex);
            continue;
        }
        st->cursor = w->slots + (size_t)w->head * SLOT_SIZE;
        st->available = w->fill[w->head];
        st->holding = 1;
        if (st->available == 0) continue; /* an empty last slot: release it above */
        pthread_mutex_unlock(&st->mutex);
        return CBSPATCH_OK;
    }
}

static inline void stream_take(stream *st, size_t n) {
    st->cursor += n;
    st->available -= n;
    st->delivered += n;
}

/* ------------------------------------------------------------------------ */
/* Old window and new buffer.                                                */

typedef struct {
    int fd;
    int64_t size;
    uint8_t *buffer;
    int64_t start;
    size_t length;
} old_reader;

/* Points *data at old[pos..pos+n) with 1 <= n <= want. `wanted_total`
   (>= want) is what the current triple still needs from pos on. The caller has
   checked 0 <= pos and pos + wanted_total <= size. */
static cbspatch_status old_get(old_reader *r, int64_t pos, size_t want, int64_t wanted_total, const uint8_t **data,
                               size_t *n, cbspatch_error *error) {
    if (!(pos >= r->start && pos < r->start + (int64_t)r->length)) {
        /* bsdiff patches of minified code are mostly tiny matches scattered
           all over old, so read what this triple needs (at least a page),
           not a whole window: a large read per 13-byte match costs more than
           the syscall it saves. */
        int64_t length = wanted_total > OLD_MIN_READ ? wanted_total : OLD_MIN_READ;
        if (length > OLD_WINDOW) length = OLD_WINDOW;
        if (length > r->size - pos) length = r->size - pos;
        ssize_t got = pread_full(r->fd, r->buffer, (size_t)length, pos);
        if (got < 0) return fail(error, CBSPATCH_ERR_IO, "reading old at %lld: %s", (long long)pos, strerror(errno));
        if ((int64_t)got != length)
            return fail(error, CBSPATCH_ERR_IO, "old file shrank while patching (short read at %lld)", (long long)pos);
        r->start = pos;
        r->length = (size_t)length;
    }
    size_t offset = (size_t)(pos - r->start);
    size_t have = r->length - offset;
    *data = r->buffer + offset;
    *n = have < want ? have : want;
    return CBSPATCH_OK;
}

typedef struct {
    int fd;
    uint8_t *buffer;
    size_t length;
    int64_t written;
    int64_t writeback_mark;
    int durable; /* fsync before the rename (and start writeback early) */
} new_writer;

static cbspatch_status new_flush(new_writer *w, cbspatch_error *error) {
    if (w->length == 0) return CBSPATCH_OK;
    if (write_full(w->fd, w->buffer, w->length) != 0)
        return fail(error, CBSPATCH_ERR_IO, "writing new at %lld: %s", (long long)w->written, strerror(errno));
    w->written += (int64_t)w->length;
    w->length = 0;
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    if (w->durable && WRITEBACK_STEP > 0 && w->written - w->writeback_mark >= WRITEBACK_STEP) {
        /* Only starts writeback of what is already written (no waiting), so
           the fsync before rename has less left to do. Failure is harmless. */
        (void)sync_file_range(w->fd, w->writeback_mark, w->written - w->writeback_mark, SYNC_FILE_RANGE_WRITE);
        w->writeback_mark = w->written;
    }
#endif
    return CBSPATCH_OK;
}

/* ------------------------------------------------------------------------ */
/* Apply                                                                     */

typedef struct {
    old_reader old;
    new_writer out;
    stream ctrl, diff, extra;
    prefetch *pf;
    int64_t new_size;
} apply_state;

/* Points *data at old[pos, pos + *n) with 1 <= *n <= want: from the prefetch
   while it runs (then *taken must be called with what was used), else read
   here. `wanted_total` (>= want) is what the triple still needs from pos on. */
static cbspatch_status old_fetch(apply_state *s, int64_t pos, size_t want, int64_t wanted_total, const uint8_t **data,
                                 size_t *n, int *from_prefetch, cbspatch_error *error) {
    prefetch *pf = s->pf;
    *from_prefetch = 0;
    if (pf != NULL && !pf->abandoned && (s->ctrl.fallback || s->ctrl.pf == NULL)) pf->abandoned = 1; /* its worker is gone */
    if (pf != NULL && !pf->abandoned) {
        if (!(pf->holding && pf->available > 0)) {
            stream *st = &s->ctrl;
            pthread_mutex_lock(&st->mutex);
            if (pf->holding) {
                pf->head = (pf->head + 1) % PREFETCH_SLOTS;
                pf->count--;
                pf->holding = 0;
                pthread_cond_broadcast(&st->changed);
            }
            while (pf->count == 0 && !pf->done) pthread_cond_wait(&st->changed, &st->mutex);
            if (pf->count > 0) {
                pf->cursor = pf->slots + (size_t)pf->head * SLOT_SIZE;
                pf->available = pf->fill[pf->head];
                pf->holding = 1;
            } else if (pf->status != CBSPATCH_OK) {
                cbspatch_status status = pf->status;
                if (error != NULL) memcpy(error->message, pf->message, MSG_SIZE);
                pthread_mutex_unlock(&st->mutex);
                return status;
            } else {
                pf->abandoned = 1; /* stopped early: read the rest here */
            }
            pthread_mutex_unlock(&st->mutex);
        }
        if (!pf->abandoned) {
            *data = pf->cursor;
            *n = pf->available < want ? pf->available : want;
            *from_prefetch = 1;
            return CBSPATCH_OK;
        }
    }
    return old_get(&s->old, pos, want, wanted_total, data, n, error);
}

static cbspatch_status copy_diff(apply_state *s, int64_t *oldpos, int64_t *newpos, int64_t x, cbspatch_error *error) {
    int64_t left = x;
    while (left > 0) {
        if (s->out.length == OUT_BUFFER) {
            cbspatch_status st = new_flush(&s->out, error);
            if (st != CBSPATCH_OK) return st;
        }
        size_t room = OUT_BUFFER - s->out.length;
        size_t want = left < (int64_t)room ? (size_t)left : room;
        const uint8_t *old = NULL;
        size_t n = 0;
        int from_prefetch = 0;
        cbspatch_status st = old_fetch(s, *oldpos, want, left, &old, &n, &from_prefetch, error);
        if (st != CBSPATCH_OK) return st;
        uint8_t *dst = s->out.buffer + s->out.length;
        size_t done = 0;
        while (done < n) {
            int r = stream_peek(&s->diff, error);
            if (r == STREAM_EOF)
                return fail(error, CBSPATCH_ERR_TRUNCATED,
                            "diff stream ended after %llu bytes, but new position %lld still needs %lld",
                            (unsigned long long)s->diff.delivered, (long long)(*newpos + (int64_t)done),
                            (long long)(left - (int64_t)done));
            if (r != CBSPATCH_OK) return (cbspatch_status)r;
            size_t k = n - done < s->diff.available ? n - done : s->diff.available;
            const uint8_t *d = s->diff.cursor;
            uint8_t *o = dst + done;
            const uint8_t *a = old + done;
            for (size_t i = 0; i < k; i++) o[i] = (uint8_t)(a[i] + d[i]);
            stream_take(&s->diff, k);
            done += k;
        }
        if (from_prefetch) {
            s->pf->cursor += n;
            s->pf->available -= n;
        }
        s->out.length += n;
        left -= (int64_t)n;
        *oldpos += (int64_t)n;
        *newpos += (int64_t)n;
    }
    return CBSPATCH_OK;
}

static cbspatch_status copy_extra(apply_state *s, int64_t *newpos, int64_t y, cbspatch_error *error) {
    int64_t left = y;
    while (left > 0) {
        if (s->out.length == OUT_BUFFER) {
            cbspatch_status st = new_flush(&s->out, error);
            if (st != CBSPATCH_OK) return st;
        }
        int r = stream_peek(&s->extra, error);
        if (r == STREAM_EOF)
            return fail(error, CBSPATCH_ERR_TRUNCATED,
                        "extra stream ended after %llu bytes, but new position %lld still needs %lld",
                        (unsigned long long)s->extra.delivered, (long long)*newpos, (long long)left);
        if (r != CBSPATCH_OK) return (cbspatch_status)r;
        size_t k = OUT_BUFFER - s->out.length;
        if (s->extra.available < k) k = s->extra.available;
        if (left < (int64_t)k) k = (size_t)left;
        memcpy(s->out.buffer + s->out.length, s->extra.cursor, k);
        stream_take(&s->extra, k);
        s->out.length += k;
        left -= (int64_t)k;
        *newpos += (int64_t)k;
    }
    return CBSPATCH_OK;
}

/* Reads one 24-byte control triple; a clean end of the control stream is TRUNCATED. */
static cbspatch_status read_triple(apply_state *s, uint64_t index, int64_t newpos, int64_t triple[3],
                                   cbspatch_error *error) {
    uint8_t raw[24];
    size_t have = 0;
    while (have < sizeof raw) {
        int r = stream_peek(&s->ctrl, error);
        if (r == STREAM_EOF) {
            if (have == 0)
                return fail(error, CBSPATCH_ERR_TRUNCATED,
                            "control stream ended after %llu triples at new position %lld of %lld",
                            (unsigned long long)index, (long long)newpos, (long long)s->new_size);
            return fail(error, CBSPATCH_ERR_TRUNCATED,
                        "control stream ends inside triple %llu (%zu of 24 bytes) at new position %lld of %lld",
                        (unsigned long long)index, have, (long long)newpos, (long long)s->new_size);
        }
        if (r != CBSPATCH_OK) return (cbspatch_status)r;
        size_t k = sizeof raw - have < s->ctrl.available ? sizeof raw - have : s->ctrl.available;
        memcpy(raw + have, s->ctrl.cursor, k);
        stream_take(&s->ctrl, k);
        have += k;
    }
    triple[0] = offtin(raw);
    triple[1] = offtin(raw + 8);
    triple[2] = offtin(raw + 16);
    return CBSPATCH_OK;
}

/* After the last triple: the stream must end cleanly with no bytes left over. */
static cbspatch_status expect_end(stream *p, cbspatch_error *error) {
    int r = stream_peek(p, error);
    if (r == STREAM_EOF) return CBSPATCH_OK;
    if (r != CBSPATCH_OK) return (cbspatch_status)r;
    return fail(error, CBSPATCH_ERR_CONTROL, "%s stream goes on past the %llu bytes the control triples use", p->name,
                (unsigned long long)p->delivered);
}

static cbspatch_status run_patch(apply_state *s, cbspatch_error *error) {
    int64_t newpos = 0, oldpos = 0;
    uint64_t index = 0;
    unsigned long idle = 0;
    while (newpos < s->new_size) {
        int64_t t[3] = {0, 0, 0};
        cbspatch_status st = read_triple(s, index, newpos, t, error);
        if (st != CBSPATCH_OK) return st;
        int64_t x = t[0], y = t[1], z = t[2];
        unsigned long long k = (unsigned long long)index;

        /* Validate the whole triple before using any of it. */
        if (x < 0)
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: diff length x=%lld is negative", k,
                        (long long)x);
        if (y < 0)
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: extra length y=%lld is negative", k,
                        (long long)y);
        if (x == 0 && y == 0) {
            /* A few bytes of bzip2 can expand into billions of these. */
            if (++idle > CBSPATCH_MAX_IDLE_TRIPLES)
                return fail(error, CBSPATCH_ERR_STALL,
                            "control stream stalls: more than %d consecutive triples produce no output "
                            "(at new position %lld)",
                            CBSPATCH_MAX_IDLE_TRIPLES, (long long)newpos);
        } else {
            idle = 0;
        }
        int64_t next_new = 0, next_old = 0;
        switch (triple_check(newpos, oldpos, x, y, z, s->new_size, s->old.size, &next_new, &next_old)) {
        case TRIPLE_OK:
            break;
        case TRIPLE_NEGATIVE_X: /* checked above */
        case TRIPLE_NEGATIVE_Y:
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: negative length", k);
        case TRIPLE_X_OVERFLOW:
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: x=%lld overflows new position %lld", k,
                        (long long)x, (long long)newpos);
        case TRIPLE_X_PAST_NEW:
            return fail(error, CBSPATCH_ERR_BOUNDS,
                        "control triple %llu: diff of %lld bytes at new position %lld would write past new size %lld",
                        k, (long long)x, (long long)newpos, (long long)s->new_size);
        case TRIPLE_Y_OVERFLOW:
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: y=%lld overflows new position %lld", k,
                        (long long)y, (long long)(newpos + x));
        case TRIPLE_Y_PAST_NEW:
            return fail(error, CBSPATCH_ERR_BOUNDS,
                        "control triple %llu: extra of %lld bytes at new position %lld would write past new size %lld",
                        k, (long long)y, (long long)(newpos + x), (long long)s->new_size);
        case TRIPLE_OLD_BEFORE_START:
            return fail(error, CBSPATCH_ERR_BOUNDS, "control triple %llu: old read at %lld before start", k,
                        (long long)oldpos);
        case TRIPLE_OLD_OVERFLOW:
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: x=%lld overflows old position %lld", k,
                        (long long)x, (long long)oldpos);
        case TRIPLE_OLD_PAST_END:
            return fail(error, CBSPATCH_ERR_BOUNDS,
                        "control triple %llu: old read of %lld bytes at %lld past end of old (%lld bytes)", k,
                        (long long)x, (long long)oldpos, (long long)s->old.size);
        case TRIPLE_Z_OVERFLOW:
            return fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: seek z=%lld overflows old position %lld",
                        k, (long long)z, (long long)(x > 0 ? oldpos + x : oldpos));
        }

        st = copy_diff(s, &oldpos, &newpos, x, error);
        if (st != CBSPATCH_OK) return st;
        st = copy_extra(s, &newpos, y, error);
        if (st != CBSPATCH_OK) return st;
        oldpos = next_old;
        index++;
    }
    /* bsdiff writes streams holding exactly what the triples use. Requiring
       each to end there verifies the CRCs and end marks of all three (so a
       cut or damaged tail is caught), and stops a stream that would go on
       decoding past what the control stream uses (a bzip2 bomb). */
    cbspatch_status st = expect_end(&s->ctrl, error);
    if (st == CBSPATCH_OK) st = expect_end(&s->diff, error);
    if (st == CBSPATCH_OK) st = expect_end(&s->extra, error);
    if (st != CBSPATCH_OK) return st;
    return new_flush(&s->out, error);
}

/* "<dir>/.<base>.cbspatch-XXXXXX" next to new_path, so rename stays on one filesystem. */
static char *temp_template(const char *new_path, char **dir_out) {
    const char *slash = strrchr(new_path, '/');
    const char *base = slash ? slash + 1 : new_path;
    size_t dir_len = slash ? (size_t)(slash - new_path) : 1;
    const char *dir = slash ? new_path : ".";
    if (slash == new_path) dir_len = 1; /* "/name": the directory is "/" */
    size_t size = dir_len + 2 + strlen(base) + sizeof ".cbspatch-XXXXXX";
    char *path = malloc(size);
    char *dir_copy = malloc(dir_len + 1);
    if (path == NULL || dir_copy == NULL) {
        free(path);
        free(dir_copy);
        return NULL;
    }
    memcpy(dir_copy, dir, dir_len);
    dir_copy[dir_len] = '\0';
    snprintf(path, size, "%s%s.%s.cbspatch-XXXXXX", dir_copy, (dir_len == 1 && dir_copy[0] == '/') ? "" : "/",
             base);
    *dir_out = dir_copy;
    return path;
}

cbspatch_status cbspatch_apply(const char *old_path, const char *patch_path, const char *new_path,
                               int64_t expected_new_size, cbspatch_error *error) {
    return cbspatch_apply_flags(old_path, patch_path, new_path, expected_new_size, 0, error);
}

cbspatch_status cbspatch_apply_flags(const char *old_path, const char *patch_path, const char *new_path,
                                     int64_t expected_new_size, unsigned flags, cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    if ((flags & ~(unsigned)CBSPATCH_NO_SYNC) != 0) return fail(error, CBSPATCH_ERR_ARGUMENT, "unknown flags %#x", flags);
    if (old_path == NULL || old_path[0] == '\0') return fail(error, CBSPATCH_ERR_ARGUMENT, "old path is empty");
    if (patch_path == NULL || patch_path[0] == '\0')
        return fail(error, CBSPATCH_ERR_ARGUMENT, "patch path is empty");
    if (new_path == NULL || new_path[0] == '\0') return fail(error, CBSPATCH_ERR_ARGUMENT, "new path is empty");
    size_t new_len = strlen(new_path);
    if (new_path[new_len - 1] == '/')
        return fail(error, CBSPATCH_ERR_ARGUMENT, "new path %s names a directory", new_path);

    cbspatch_status status = CBSPATCH_OK;
    int patch_fd = -1, old_fd = -1, tmp_fd = -1;
    char *tmp_path = NULL, *dir = NULL;
    apply_state *s = NULL;
    patch_header h;

    patch_fd = open_retry(patch_path, O_RDONLY | O_CLOEXEC);
    if (patch_fd < 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot open patch %s: %s", patch_path, strerror(errno));
        goto done;
    }
    status = read_header_fd(patch_fd, patch_path, &h, error);
    if (status != CBSPATCH_OK) goto done;
    if (expected_new_size >= 0 && h.new_size != expected_new_size) {
        status = fail(error, CBSPATCH_ERR_SIZE_MISMATCH, "patch makes %lld bytes but %lld are expected",
                      (long long)h.new_size, (long long)expected_new_size);
        goto done;
    }

    old_fd = open_retry(old_path, O_RDONLY | O_CLOEXEC);
    if (old_fd < 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot open old %s: %s", old_path, strerror(errno));
        goto done;
    }
    struct stat old_st;
    if (fstat(old_fd, &old_st) != 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot stat old %s: %s", old_path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(old_st.st_mode)) {
        status = fail(error, CBSPATCH_ERR_IO, "old %s is a directory", old_path);
        goto done;
    }

    s = calloc(1, sizeof *s);
    if (s == NULL) {
        status = fail(error, CBSPATCH_ERR_NOMEM, "out of memory");
        goto done;
    }
    s->new_size = h.new_size;
    s->old.fd = old_fd;
    s->old.size = (int64_t)old_st.st_size;
    s->old.buffer = malloc(OLD_WINDOW);
    s->out.buffer = malloc(OUT_BUFFER);
    s->pf = calloc(1, sizeof *s->pf);
    if (s->pf != NULL) {
        s->pf->slots = malloc((size_t)PREFETCH_SLOTS * SLOT_SIZE);
        s->pf->reads = malloc((size_t)PREFETCH_READS * sizeof *s->pf->reads);
        s->pf->fd = old_fd;
        s->pf->new_size = h.new_size;
        s->pf->old_size = (int64_t)old_st.st_size;
        s->pf->slot = -1;
    }
    if (s->old.buffer == NULL || s->out.buffer == NULL || s->pf == NULL || s->pf->slots == NULL ||
        s->pf->reads == NULL) {
        status = fail(error, CBSPATCH_ERR_NOMEM, "out of memory for buffers");
        goto done;
    }

    tmp_path = temp_template(new_path, &dir);
    if (tmp_path == NULL) {
        status = fail(error, CBSPATCH_ERR_NOMEM, "out of memory");
        goto done;
    }
    tmp_fd = mkostemp(tmp_path, O_CLOEXEC);
    if (tmp_fd < 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        free(tmp_path);
        tmp_path = NULL; /* nothing to remove */
        goto done;
    }
    if (fchmod(tmp_fd, 0644) != 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot chmod %s: %s", tmp_path, strerror(errno));
        goto done;
    }
    s->out.fd = tmp_fd;
    s->out.durable = (flags & CBSPATCH_NO_SYNC) == 0;

    {
        int64_t ctrl_at = HEADER_SIZE, diff_at = ctrl_at + h.ctrl_len, extra_at = diff_at + h.diff_len;
        /* The diff stream starts first: for stored packages it is the longest
           single chain of work. The extra stream's first worker touches its
           whole block array once done (see worker_main): it finishes early
           unless the extra stream is what decides the time, and then its
           array is full anyway. */
        int diff_fast = CBSPATCH_DIFF_FAST || h.new_size <= CBSPATCH_DIFF_FAST_BELOW;
        status = stream_start(&s->diff, "diff", patch_fd, diff_at, h.diff_len, 1, CBSPATCH_DIFF_SLOTS, diff_fast, 0,
                              NULL, error);
        if (status == CBSPATCH_OK)
            status = stream_start(&s->ctrl, "control", patch_fd, ctrl_at, h.ctrl_len, 1, CBSPATCH_CTRL_SLOTS, 0, 0,
                                  CBSPATCH_PREFETCH ? s->pf : NULL, error);
        if (status == CBSPATCH_OK)
            status = stream_start(&s->extra, "extra", patch_fd, extra_at, h.file_size - extra_at,
                                  CBSPATCH_EXTRA_WORKERS, CBSPATCH_EXTRA_SLOTS, CBSPATCH_EXTRA_FAST, 1, NULL, error);
        if (status == CBSPATCH_OK) status = run_patch(s, error);
        /* Join every worker before freeing anything, so the peak footprint
           does not depend on which stream finished first. */
        stream_stop_workers(&s->ctrl);
        stream_stop_workers(&s->diff);
        stream_stop_workers(&s->extra);
        stream_destroy(&s->ctrl);
        stream_destroy(&s->diff);
        stream_destroy(&s->extra);
        if (status != CBSPATCH_OK) goto done;
    }

    if ((flags & CBSPATCH_NO_SYNC) == 0 && fsync(tmp_fd) != 0) {
        status = fail(error, CBSPATCH_ERR_IO, "fsync %s: %s", tmp_path, strerror(errno));
        goto done;
    }
    int close_result = close(tmp_fd);
    tmp_fd = -1;
    if (close_result != 0) {
        status = fail(error, CBSPATCH_ERR_IO, "close %s: %s", tmp_path, strerror(errno));
        goto done;
    }
    if (rename(tmp_path, new_path) != 0) {
        status = fail(error, CBSPATCH_ERR_IO, "cannot rename %s to %s: %s", tmp_path, new_path, strerror(errno));
        goto done;
    }
    free(tmp_path);
    tmp_path = NULL;
    /* The directory is not fsynced: callers that need the rename itself to
       survive a crash sync the directory (it costs a journal commit, and a
       caller that writes several files needs only one). */

done:
    if (tmp_fd >= 0) close(tmp_fd);
    if (tmp_path != NULL) unlink(tmp_path);
    if (s != NULL) {
        if (s->pf != NULL) {
            free(s->pf->slots);
            free(s->pf->reads);
            free(s->pf);
        }
        free(s->old.buffer);
        free(s->out.buffer);
        free(s);
    }
    free(tmp_path);
    free(dir);
    if (old_fd >= 0) close(old_fd);
    if (patch_fd >= 0) close(patch_fd);
    return status;
}
