/*-
 * Native bsdiff producing BSDIFF40 patches, for the publisher (never linked
 * into the device engine). See include/cbsdiff.h.
 *
 * Where it comes from and under which licence (all listed in NOTICE):
 * - the algorithm and patch format are bsdiff 4.3's (Colin Percival,
 *   BSD-2-Clause, reproduced below as that licence requires);
 * - the suffix array comes from libdivsufsort (Yuta Mori, MIT), linked from
 *   the system (libdivsufsort-dev), not vendored;
 * - the three streams are compressed by libbz2 (Julian Seward, bzip2
 *   licence), linked from the system;
 * - everything else (the batched search, the encoder thread, the error
 *   handling) is this project's, under its licence (MIT, see LICENSE).
 *
 * The difference algorithm (match search, the lenf/lenb/overlap extension
 * logic and the patch layout) is that of bsdiff 4.3:
 *
 * Copyright 2003-2005 Colin Percival
 * All rights reserved
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted providing that the following conditions
 * are met:
 * 1. Redistributions of source code must retain the above copyright
 *    notice, this list of conditions and the following disclaimer.
 * 2. Redistributions in binary form must reproduce the above copyright
 *    notice, this list of conditions and the following disclaimer in the
 *    documentation and/or other materials provided with the distribution.
 *
 * THIS SOFTWARE IS PROVIDED BY THE AUTHOR ``AS IS'' AND ANY EXPRESS OR
 * IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
 * WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
 * ARE DISCLAIMED.  IN NO EVENT SHALL THE AUTHOR BE LIABLE FOR ANY
 * DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
 * DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS
 * OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION)
 * HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT,
 * STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING
 * IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
 * POSSIBILITY OF SUCH DAMAGE.
 *
 * Differences from bsdiff 4.3, none of which changes the patch produced
 * (the output is byte-identical to bsdiff 4.3's):
 * - the suffix array comes from libdivsufsort (32-bit indices) instead of
 *   qsufsort with 64-bit indices: much faster and a quarter of the memory;
 * - the binary search skips work whose outcome is already known (see
 *   search_batch) and runs several searches in lock step to overlap their
 *   cache misses;
 * - the diff and extra blocks are not buffered raw: a second thread
 *   compresses the three streams while the search runs;
 * - every failure is returned as a status with a message; nothing exits
 *   (bsdiff 4.3 calls err(3)), and the patch is written to a temporary file
 *   renamed onto the target only when complete.
 */

#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

#include "cbsdiff.h"

#include <bzlib.h>
#include <divsufsort.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MIN(x, y) (((x) < (y)) ? (x) : (y))
#define MAX(x, y) (((x) > (y)) ? (x) : (y))

/* Staging buffers for bzip2 input and output. */
#define STAGE_BYTES ((size_t)1 << 20)
#define OUT_BYTES ((size_t)1 << 16)

#ifdef CBSDIFF_TRACE
#include <time.h>
/* Phase timings on stderr, for tuning only (cc -DCBSDIFF_TRACE). */
static void trace(const char *what)
{
    static double last;
    struct timespec ts;
    double now;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (last != 0)
        fprintf(stderr, "%-10s %.3f s\n", what, now - last);
    last = now;
}
#else
#define trace(what) ((void)0)
#endif

static void set_error(cbsdiff_error *error, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(cbsdiff_error *error, const char *fmt, ...)
{
    va_list ap;
    char *p;

    if (error == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(error->message, sizeof(error->message), fmt, ap);
    va_end(ap);
    /* One line only, even if a path contains a newline. */
    for (p = error->message; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* ------------------------------------------------------------------------ */
/* Memory */

/* The old file and its suffix array are read at random all through the
 * search; backing them with 2 MiB pages where the kernel offers them (Linux
 * transparent huge pages in "madvise" mode) saves TLB misses. */
static void *big_alloc(size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)2 << 20;
    if (n >= 2 * huge) {
        void *p = NULL;
        long page = sysconf(_SC_PAGESIZE);
        size_t len = n;
        if (posix_memalign(&p, huge, n) != 0)
            return NULL;
        if (page > 0)
            len = (n + (size_t)page - 1) / (size_t)page * (size_t)page;
        (void)madvise(p, len, MADV_HUGEPAGE); /* only a hint */
        return p;
    }
#endif
    return malloc(n);
}

/* ------------------------------------------------------------------------ */
/* Input */

/* Reads the whole file into a malloc'ed buffer (at least one byte allocated
 * so an empty file still yields a non-NULL pointer). Files longer than limit
 * give CBSDIFF_ERR_TOO_LARGE. */
static cbsdiff_status read_file(const char *path, const char *what, int64_t limit,
                                int huge, uint8_t **out, int64_t *outsize,
                                cbsdiff_error *error)
{
    struct stat st;
    uint8_t *buf = NULL, *grown;
    size_t cap, len = 0;
    ssize_t r;
    int fd, saved;

    *out = NULL;
    *outsize = 0;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        set_error(error, "cannot open %s file %s: %s", what, path, strerror(errno));
        return CBSDIFF_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        saved = errno;
        close(fd);
        set_error(error, "cannot stat %s file %s: %s", what, path, strerror(saved));
        return CBSDIFF_ERR_IO;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        set_error(error, "%s file %s is a directory", what, path);
        return CBSDIFF_ERR_IO;
    }
    if (S_ISREG(st.st_mode)) {
        if ((int64_t)st.st_size > limit) {
            close(fd);
            set_error(error, "%s file %s is too large (%lld bytes, limit %lld)", what,
                      path, (long long)st.st_size, (long long)limit);
            return CBSDIFF_ERR_TOO_LARGE;
        }
        /* One spare byte so reaching EOF needs no reallocation. */
        cap = (size_t)st.st_size + 1;
    } else {
        cap = (size_t)1 << 16;
    }
    buf = huge ? big_alloc(cap) : malloc(cap);
    if (buf == NULL) {
        close(fd);
        set_error(error, "out of memory reading %s file %s (%zu bytes)", what, path, cap);
        return CBSDIFF_ERR_NOMEM;
    }
    for (;;) {
        if (len == cap) {
            /* The file grew after fstat, or is not a regular file. */
            size_t ncap;
            if ((int64_t)len > limit) {
                free(buf);
                close(fd);
                set_error(error, "%s file %s is too large (limit %lld bytes)", what,
                          path, (long long)limit);
                return CBSDIFF_ERR_TOO_LARGE;
            }
            ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
            grown = realloc(buf, ncap);
            if (grown == NULL) {
                free(buf);
                close(fd);
                set_error(error, "out of memory reading %s file %s", what, path);
                return CBSDIFF_ERR_NOMEM;
            }
            buf = grown;
            cap = ncap;
        }
        r = read(fd, buf + len, MIN(cap - len, (size_t)1 << 30));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            saved = errno;
            free(buf);
            close(fd);
            set_error(error, "cannot read %s file %s: %s", what, path, strerror(saved));
            return CBSDIFF_ERR_IO;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if ((int64_t)len > limit) {
        free(buf);
        set_error(error, "%s file %s is too large (limit %lld bytes)", what, path,
                  (long long)limit);
        return CBSDIFF_ERR_TOO_LARGE;
    }
    *out = buf;
    *outsize = (int64_t)len;
    return CBSDIFF_OK;
}

/* ------------------------------------------------------------------------ */
/* Matching (bsdiff 4.3) */

/* Number of leading bytes a and b have in common, at most n. */
static inline int64_t common_prefix(const uint8_t *a, const uint8_t *b, int64_t n)
{
    int64_t i = 0;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Eight bytes at a time; the lowest differing byte of the XOR is the
     * first differing byte on a little-endian machine. */
    while (i + 8 <= n) {
        uint64_t x, y, d;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        d = x ^ y;
        if (d != 0)
            return i + (__builtin_ctzll(d) >> 3);
        i += 8;
    }
#endif
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Everything the searches read: the old file, its suffix array and a table
 * of where each two-byte prefix's suffixes lie in it. */
typedef struct {
    const int32_t *I;   /* oldsize + 1 entries; I[0] = oldsize, the empty suffix */
    const uint8_t *old;
    int64_t oldsize;
    const uint8_t *nw;
    int64_t newsize;
    const int32_t *lo;  /* lo[v]: first index in I of the suffixes beginning with */
    const int32_t *cnt; /* the two bytes v = b0 << 8 | b1; cnt[v]: how many */
    int64_t one;        /* index in I of the one-byte suffix, -1 if none */
} matcher;

/* Fills lo and cnt (65536 entries each) by counting two-byte prefixes, in the
 * order divsufsort sorts suffixes: the empty suffix first (I[0]), and the
 * one-byte suffix old[oldsize - 1] = c before every suffix that begins with c
 * and is longer. */
static void prefix_table(const uint8_t *old, int64_t oldsize, int32_t *lo, int32_t *cnt,
                         int64_t *one)
{
    int64_t p, at = 1; /* after the empty suffix */
    int v;

    memset(cnt, 0, 65536 * sizeof(int32_t));
    for (p = 0; p + 1 < oldsize; p++)
        cnt[old[p] << 8 | old[p + 1]]++;
    *one = -1;
    for (v = 0; v < 65536; v++) {
        if ((v & 0xff) == 0 && oldsize > 0 && old[oldsize - 1] == (v >> 8))
            *one = at++;
        lo[v] = (int32_t)at;
        at += cnt[v];
    }
}

/* Most positions of the new file need their own search, and nearly all of a
 * search's time goes to cache misses (I[x], then old[I[x]]) at the deep
 * levels of the binary search. Searches for different positions are
 * independent, so several run in lock step: each round issues the loads of
 * every search before using any of them, and the misses overlap. */
#define SEARCH_BATCH_MAX 32
/* Fewest searches started together: even a scan loop that stops at once
 * costs about one miss chain, and a few extra searches ride along nearly
 * free. */
#ifndef SEARCH_BATCH_MIN
#define SEARCH_BATCH_MIN 4
#endif

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch((p))
#else
#define PREFETCH(p) ((void)0)
#endif

typedef struct {
    const uint8_t *pat;
    int64_t psz;
    int64_t st, en;     /* current bounds in I */
    int64_t lst, len;   /* common-prefix lengths of the bounds with pat: exact,
                           or a lower bound when the flag below is clear */
    int64_t x;          /* midpoint to compare next */
    int64_t inlo, inhi; /* indices in I whose suffixes begin with pat[0..2) */
    int exact_st, exact_en;
    int slot;           /* where the result goes */
} search_state;

/* Advances s to its next midpoint that needs a real comparison, taking the
 * steps whose outcome the prefix table already gives; returns 0 when the
 * search has converged. */
static inline int walk(search_state *s, int64_t one)
{
    while (s->en - s->st >= 2) {
        int64_t x = s->st + (s->en - s->st) / 2;
        if (x < s->inlo && x != one) {
            /* Sorts before the pattern's first two bytes and is not a prefix
             * of the pattern: memcmp < 0. Its prefix length is 0 or 1. */
            s->st = x;
            s->lst = 0;
            s->exact_st = 0;
        } else if (x >= s->inhi) {
            /* Sorts after every suffix beginning like the pattern: memcmp > 0. */
            s->en = x;
            s->len = 0;
            s->exact_en = 0;
        } else {
            s->x = x;
            return 1;
        }
    }
    return 0;
}

/* bsdiff 4.3's search() for the patterns nw[at + j .. newsize), j < count:
 * a binary search of I that stops on two neighbours and returns the longer
 * match of the two (the upper one on a tie), in lens[j] and poss[j].
 *
 * It takes exactly the original's path, more cheaply:
 * - the original compares with memcmp(old + I[x], pattern,
 *   MIN(oldsize - I[x], patternsize)) from the first byte. Here the common-
 *   prefix lengths of both bounds are kept (exact, or lower bounds), every
 *   suffix between two bounds shares at least the smaller with the pattern,
 *   so the comparison starts there and takes the same branch;
 * - midpoints outside the pattern's two-byte bucket are decided from the
 *   prefix table without reading memory (the one-byte suffix, a prefix of
 *   some patterns, is always compared for real);
 * - lengths left inexact are computed when the search ends. */
static void search_batch(const matcher *mt, int64_t at, int count, int64_t *lens,
                         int64_t *poss)
{
    const int32_t *I = mt->I;
    const uint8_t *old = mt->old;
    const int64_t oldsize = mt->oldsize;
    search_state ss[SEARCH_BATCH_MAX];
    search_state *active[SEARCH_BATCH_MAX], *done[SEARCH_BATCH_MAX];
    int nactive = 0, ndone = 0, a, j;

    for (j = 0; j < count; j++) {
        search_state *s = &ss[j];
        s->pat = mt->nw + at + j;
        s->psz = mt->newsize - at - j;
        s->st = 0;
        s->en = oldsize;
        s->lst = 0; /* the empty suffix */
        s->exact_st = 1;
        s->len = 0;
        s->exact_en = 0;
        s->slot = j;
        if (s->psz >= 2) {
            int v = s->pat[0] << 8 | s->pat[1];
            s->inlo = mt->lo[v];
            s->inhi = (int64_t)mt->lo[v] + mt->cnt[v];
        } else {
            /* A one-byte pattern equals every suffix beginning with its byte
             * under the original's comparison: compare everything for real. */
            s->inlo = 0;
            s->inhi = oldsize + 1;
        }
        if (walk(s, mt->one)) {
            active[nactive++] = s;
            PREFETCH(&I[s->x]);
        } else {
            done[ndone++] = s;
        }
    }
    while (nactive > 0) {
        /* The entries were requested last round; now request the bytes. */
        for (a = 0; a < nactive; a++) {
            search_state *s = active[a];
            int64_t p = I[s->x];
            PREFETCH(old + p + MIN(s->lst, s->len));
        }
        /* Compare, narrow, walk to the next midpoint and request its entry. */
        for (a = 0; a < nactive;) {
            search_state *s = active[a];
            int64_t p = I[s->x];
            int64_t m = MIN(oldsize - p, s->psz);
            int64_t k = MIN(MIN(s->lst, s->len), m);
            int64_t l = k + common_prefix(old + p + k, s->pat + k, m - k);
            if (l < m && old[p + l] < s->pat[l]) {
                s->st = s->x;
                s->lst = l;
                s->exact_st = 1;
            } else {
                s->en = s->x;
                s->len = l;
                s->exact_en = 1;
            }
            if (walk(s, mt->one)) {
                PREFETCH(&I[s->x]);
                a++;
            } else {
                done[ndone++] = s;
                active[a] = active[--nactive];
            }
        }
    }
    for (j = 0; j < ndone; j++) {
        search_state *s = done[j];
        int64_t pst = I[s->st], pen = I[s->en];
        if (!s->exact_st)
            s->lst = common_prefix(old + pst, s->pat, MIN(oldsize - pst, s->psz));
        if (!s->exact_en)
            s->len = common_prefix(old + pen, s->pat, MIN(oldsize - pen, s->psz));
        if (s->lst > s->len) {
            poss[s->slot] = pst;
            lens[s->slot] = s->lst;
        } else {
            poss[s->slot] = pen;
            lens[s->slot] = s->len;
        }
    }
}

/* Search results for the positions [base, base + count) of the new file. */
typedef struct {
    int64_t base;
    int count;
    int64_t lens[SEARCH_BATCH_MAX], poss[SEARCH_BATCH_MAX];
} search_cache;

/* search(scan) with look-ahead. `run` is how many positions the current scan
 * loop has already stepped over one by one: a loop that has stepped r times
 * will probably step about r more, so that many searches are batched. Results
 * depend only on the position, so stale ones are never wrong, only wasted. */
static inline int64_t search_at(search_cache *c, const matcher *mt, int64_t scan,
                                int64_t run, int64_t *pos)
{
    int64_t j = scan - c->base;

    if (j < 0 || j >= c->count) {
        int64_t k = MIN(MAX(run, (int64_t)SEARCH_BATCH_MIN), (int64_t)SEARCH_BATCH_MAX);
        k = MIN(k, mt->newsize - scan);
        search_batch(mt, scan, (int)k, c->lens, c->poss);
        c->base = scan;
        c->count = (int)k;
        j = 0;
    }
    *pos = c->poss[j];
    return c->lens[j];
}

/* ------------------------------------------------------------------------ */
/* Output: bzip2 streams */

/* bsdiff's offtout: 64-bit sign-magnitude, little-endian. */
static void offtout(int64_t x, uint8_t *buf)
{
    uint64_t y = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    int i;

    for (i = 0; i < 8; i++) {
        buf[i] = (uint8_t)(y & 0xff);
        y >>= 8;
    }
    if (x < 0)
        buf[7] |= 0x80;
}

static cbsdiff_status write_all(int fd, const char *path, const uint8_t *p, size_t n,
                                cbsdiff_error *error)
{
    while (n > 0) {
        ssize_t w = write(fd, p, MIN(n, (size_t)1 << 30));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            set_error(error, "cannot write patch %s: %s", path, strerror(errno));
            return CBSDIFF_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return CBSDIFF_OK;
}

typedef struct {
    uint8_t *data;
    size_t len, cap;
} membuf;

/* One bzip2 stream (level 9, like bsdiff), written to a file descriptor or,
 * when fd < 0, collected in memory. */
typedef struct {
    bz_stream strm;
    int initialized;
    int fd;
    const char *path; /* the patch path, for messages */
    membuf mem;
    uint64_t written; /* compressed bytes produced so far */
    cbsdiff_error *error;
    uint8_t out[OUT_BYTES];
} bz_writer;

static cbsdiff_status bz_fail(bz_writer *z, const char *op, int rc)
{
    if (rc == BZ_MEM_ERROR) {
        set_error(z->error, "out of memory in bzip2 %s", op);
        return CBSDIFF_ERR_NOMEM;
    }
    set_error(z->error, "bzip2 %s failed (error %d)", op, rc);
    return CBSDIFF_ERR_BZIP2;
}

static cbsdiff_status bz_open(bz_writer *z, int fd, const char *path, cbsdiff_error *error)
{
    int rc;

    memset(&z->strm, 0, sizeof(z->strm));
    z->initialized = 0;
    z->fd = fd;
    z->path = path;
    z->mem.data = NULL;
    z->mem.len = z->mem.cap = 0;
    z->written = 0;
    z->error = error;
    /* Same parameters as bsdiff's BZ2_bzWriteOpen(&e, f, 9, 0, 0). */
    rc = BZ2_bzCompressInit(&z->strm, 9, 0, 0);
    if (rc != BZ_OK)
        return bz_fail(z, "init", rc);
    z->initialized = 1;
    return CBSDIFF_OK;
}

/* Moves whatever bzip2 has produced into the file or memory. */
static cbsdiff_status bz_drain(bz_writer *z)
{
    size_t produced = OUT_BYTES - z->strm.avail_out;

    if (produced > 0) {
        if (z->fd >= 0) {
            cbsdiff_status st = write_all(z->fd, z->path, z->out, produced, z->error);
            if (st != CBSDIFF_OK)
                return st;
        } else {
            if (z->mem.cap - z->mem.len < produced) {
                size_t ncap = MAX(z->mem.cap * 2, z->mem.len + produced);
                uint8_t *nd = realloc(z->mem.data, ncap);
                if (nd == NULL) {
                    set_error(z->error, "out of memory for compressed patch data");
                    return CBSDIFF_ERR_NOMEM;
                }
                z->mem.data = nd;
                z->mem.cap = ncap;
            }
            memcpy(z->mem.data + z->mem.len, z->out, produced);
            z->mem.len += produced;
        }
        z->written += produced;
    }
    return CBSDIFF_OK;
}

static cbsdiff_status bz_write(bz_writer *z, const uint8_t *p, size_t n)
{
    cbsdiff_status st;
    int rc;

    while (n > 0) {
        size_t chunk = MIN(n, (size_t)1 << 30);
        z->strm.next_in = (char *)(uintptr_t)p;
        z->strm.avail_in = (unsigned int)chunk;
        while (z->strm.avail_in > 0) {
            z->strm.next_out = (char *)z->out;
            z->strm.avail_out = (unsigned int)OUT_BYTES;
            rc = BZ2_bzCompress(&z->strm, BZ_RUN);
            if (rc != BZ_RUN_OK)
                return bz_fail(z, "compress", rc);
            st = bz_drain(z);
            if (st != CBSDIFF_OK)
                return st;
        }
        p += chunk;
        n -= chunk;
    }
    return CBSDIFF_OK;
}

static cbsdiff_status bz_finish(bz_writer *z)
{
    cbsdiff_status st;
    int rc;

    z->strm.next_in = NULL;
    z->strm.avail_in = 0;
    for (;;) {
        z->strm.next_out = (char *)z->out;
        z->strm.avail_out = (unsigned int)OUT_BYTES;
        rc = BZ2_bzCompress(&z->strm, BZ_FINISH);
        if (rc != BZ_FINISH_OK && rc != BZ_STREAM_END)
            return bz_fail(z, "finish", rc);
        st = bz_drain(z);
        if (st != CBSDIFF_OK)
            return st;
        if (rc == BZ_STREAM_END)
            return CBSDIFF_OK;
    }
}

static void bz_close(bz_writer *z)
{
    if (z->initialized) {
        BZ2_bzCompressEnd(&z->strm);
        z->initialized = 0;
    }
    free(z->mem.data);
    z->mem.data = NULL;
    z->mem.len = z->mem.cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Encoder: turns control tuples into the three compressed blocks */

/* One control tuple: add `add` diff bytes, copy `copy` extra bytes, then move
 * the old-file cursor by `seek`. */
typedef struct {
    int64_t add, copy, seek;
} ctrl_entry;

#define CHUNK_ENTRIES 16384

typedef struct ctrl_chunk {
    struct ctrl_chunk *next;
    size_t n;
    ctrl_entry v[CHUNK_ENTRIES];
} ctrl_chunk;

/* The search hands chunks of tuples to the encoder, which regenerates the
 * diff and extra bytes from them and compresses the three streams, on its own
 * thread so compression overlaps the search. The ctrl stream goes straight
 * into the patch file after the header; the diff and extra streams wait in
 * memory (compressed) until the ctrl stream's length is known. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ctrl_chunk *head, *tail; /* handed over, not yet encoded */
    int closed;              /* no more chunks will come */
    int cancelled;           /* the search failed: drop everything */
    int failed;              /* the encoder failed: the search may stop */
    int have_mu, have_cv;    /* which of mu and cv exist */

    /* Used by the encoder only. */
    const uint8_t *old, *nw;
    int64_t oldpos, newpos;
    bz_writer ctrl, diff, extra;
    uint8_t *stage; /* diff bytes waiting for bzip2 */
    size_t stage_fill;
    uint8_t *ctrl_stage; /* one chunk of encoded tuples */
    cbsdiff_status status;
    cbsdiff_error error;
} encoder;

static cbsdiff_status encoder_init(encoder *e, int fd, const char *patch_path,
                                   const uint8_t *old, const uint8_t *nw,
                                   cbsdiff_error *error)
{
    cbsdiff_status st;

    memset(e, 0, sizeof(*e));
    e->old = old;
    e->nw = nw;
    e->status = CBSDIFF_OK;
    /* After the memset, encoder_destroy can undo any partial init. */
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        set_error(error, "cannot create a mutex");
        return CBSDIFF_ERR_NOMEM;
    }
    e->have_mu = 1;
    if (pthread_cond_init(&e->cv, NULL) != 0) {
        set_error(error, "cannot create a condition variable");
        return CBSDIFF_ERR_NOMEM;
    }
    e->have_cv = 1;
    e->stage = malloc(STAGE_BYTES);
    e->ctrl_stage = malloc(CHUNK_ENTRIES * 24);
    if (e->stage == NULL || e->ctrl_stage == NULL) {
        set_error(error, "out of memory");
        return CBSDIFF_ERR_NOMEM;
    }
    st = bz_open(&e->ctrl, fd, patch_path, &e->error);
    if (st == CBSDIFF_OK)
        st = bz_open(&e->diff, -1, patch_path, &e->error);
    if (st == CBSDIFF_OK)
        st = bz_open(&e->extra, -1, patch_path, &e->error);
    if (st != CBSDIFF_OK && error != NULL)
        memcpy(error, &e->error, sizeof(*error));
    return st;
}

/* Frees everything; only after the encoder thread has ended. */
static void encoder_destroy(encoder *e)
{
    ctrl_chunk *c, *next;

    for (c = e->head; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    e->head = e->tail = NULL;
    bz_close(&e->ctrl);
    bz_close(&e->diff);
    bz_close(&e->extra);
    free(e->stage);
    free(e->ctrl_stage);
    if (e->have_cv)
        pthread_cond_destroy(&e->cv);
    if (e->have_mu)
        pthread_mutex_destroy(&e->mu);
}

static cbsdiff_status encode_chunk(encoder *e, const ctrl_chunk *c)
{
    cbsdiff_status st;
    size_t k;

    for (k = 0; k < c->n; k++) {
        const ctrl_entry *t = &c->v[k];
        const uint8_t *np = e->nw + e->newpos, *op = e->old + e->oldpos;
        int64_t i = 0;

        offtout(t->add, e->ctrl_stage + 24 * k);
        offtout(t->copy, e->ctrl_stage + 24 * k + 8);
        offtout(t->seek, e->ctrl_stage + 24 * k + 16);

        while (i < t->add) {
            size_t n = (size_t)MIN((int64_t)(STAGE_BYTES - e->stage_fill), t->add - i);
            uint8_t *dst = e->stage + e->stage_fill;
            size_t j;
            for (j = 0; j < n; j++)
                dst[j] = (uint8_t)(np[i + (int64_t)j] - op[i + (int64_t)j]);
            e->stage_fill += n;
            i += (int64_t)n;
            if (e->stage_fill == STAGE_BYTES) {
                st = bz_write(&e->diff, e->stage, e->stage_fill);
                if (st != CBSDIFF_OK)
                    return st;
                e->stage_fill = 0;
            }
        }
        /* Extra bytes are contiguous in the new file: no copy needed. */
        if (t->copy > 0) {
            st = bz_write(&e->extra, np + t->add, (size_t)t->copy);
            if (st != CBSDIFF_OK)
                return st;
        }
        e->newpos += t->add + t->copy;
        e->oldpos += t->add + t->seek;
    }
    return bz_write(&e->ctrl, e->ctrl_stage, 24 * c->n);
}

/* Encodes chunks until the search closes the queue, then ends the streams. */
static void *encoder_main(void *arg)
{
    encoder *e = arg;
    ctrl_chunk *c;
    int cancelled;

    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (e->head == NULL && !e->closed)
            pthread_cond_wait(&e->cv, &e->mu);
        c = e->head;
        if (c != NULL) {
            e->head = c->next;
            if (e->head == NULL)
                e->tail = NULL;
        }
        cancelled = e->cancelled;
        pthread_mutex_unlock(&e->mu);
        if (c == NULL)
            break;
        if (e->status == CBSDIFF_OK && !cancelled) {
            e->status = encode_chunk(e, c);
            if (e->status != CBSDIFF_OK) {
                pthread_mutex_lock(&e->mu);
                e->failed = 1;
                pthread_mutex_unlock(&e->mu);
            }
        }
        free(c);
    }
    if (e->status == CBSDIFF_OK && !cancelled) {
        if (e->stage_fill > 0)
            e->status = bz_write(&e->diff, e->stage, e->stage_fill);
        if (e->status == CBSDIFF_OK)
            e->status = bz_finish(&e->ctrl);
        if (e->status == CBSDIFF_OK)
            e->status = bz_finish(&e->diff);
        if (e->status == CBSDIFF_OK)
            e->status = bz_finish(&e->extra);
    }
    return NULL;
}

/* Hands a full chunk to the encoder; -1 if the encoder has failed (the
 * chunk is freed then). */
static int encoder_submit(encoder *e, ctrl_chunk *c)
{
    int failed;

    pthread_mutex_lock(&e->mu);
    failed = e->failed;
    if (!failed) {
        c->next = NULL;
        if (e->tail != NULL)
            e->tail->next = c;
        else
            e->head = c;
        e->tail = c;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (failed)
        free(c);
    return failed ? -1 : 0;
}

static void encoder_close(encoder *e, int cancelled)
{
    pthread_mutex_lock(&e->mu);
    e->closed = 1;
    e->cancelled = cancelled;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ------------------------------------------------------------------------ */
/* The main loop of bsdiff 4.3 */

enum { DIFF_OK = 0, DIFF_NOMEM = -1, DIFF_ENCODER_FAILED = -2 };

/* bsdiff 4.3's main loop, unchanged in its decisions; the control tuples go
 * to the encoder in chunks instead of to a bzip2 stream. Over 100 lines on
 * purpose: it is kept in one piece, with bsdiff 4.3's variable names, so it
 * can be compared line by line with the reference, which is what makes its
 * output byte-identical to bsdiff 4.3's (and splitting it would add nothing
 * but state passed around). */
static int diff_core(const matcher *mt, encoder *enc)
{
    const uint8_t *old = mt->old, *nw = mt->nw;
    const int64_t oldsize = mt->oldsize, newsize = mt->newsize;
    int64_t scan = 0, len = 0, pos = 0;
    int64_t lastscan = 0, lastpos = 0, lastoffset = 0;
    int64_t oldscore, scsc, first;
    int64_t s, Sf, lenf, Sb, lenb, overlap, Ss, lens, i;
    search_cache cache;
    ctrl_chunk *chunk = NULL;

    cache.base = 0;
    cache.count = 0;
    while (scan < newsize) {
        oldscore = 0;

        for (scsc = first = scan += len; scan < newsize; scan++) {
            len = search_at(&cache, mt, scan, scan - first, &pos);

            for (; scsc < scan + len; scsc++)
                if ((scsc + lastoffset < oldsize) &&
                    (old[scsc + lastoffset] == nw[scsc]))
                    oldscore++;

            if (((len == oldscore) && (len != 0)) || (len > oldscore + 8))
                break;

            if ((scan + lastoffset < oldsize) &&
                (old[scan + lastoffset] == nw[scan]))
                oldscore--;
        }

        if ((len != oldscore) || (scan == newsize)) {
            s = 0;
            Sf = 0;
            lenf = 0;
            for (i = 0; (lastscan + i < scan) && (lastpos + i < oldsize);) {
                if (old[lastpos + i] == nw[lastscan + i])
                    s++;
                i++;
                if (s * 2 - i > Sf * 2 - lenf) {
                    Sf = s;
                    lenf = i;
                }
            }

            lenb = 0;
            if (scan < newsize) {
                s = 0;
                Sb = 0;
                for (i = 1; (scan >= lastscan + i) && (pos >= i); i++) {
                    if (old[pos - i] == nw[scan - i])
                        s++;
                    if (s * 2 - i > Sb * 2 - lenb) {
                        Sb = s;
                        lenb = i;
                    }
                }
            }

            if (lastscan + lenf > scan - lenb) {
                overlap = (lastscan + lenf) - (scan - lenb);
                s = 0;
                Ss = 0;
                lens = 0;
                for (i = 0; i < overlap; i++) {
                    if (nw[lastscan + lenf - overlap + i] ==
                        old[lastpos + lenf - overlap + i])
                        s++;
                    if (nw[scan - lenb + i] == old[pos - lenb + i])
                        s--;
                    if (s > Ss) {
                        Ss = s;
                        lens = i + 1;
                    }
                }

                lenf += lens - overlap;
                lenb -= lens;
            }

            if (chunk == NULL) {
                chunk = malloc(sizeof(*chunk));
                if (chunk == NULL)
                    return DIFF_NOMEM;
                chunk->n = 0;
            }
            chunk->v[chunk->n].add = lenf;
            chunk->v[chunk->n].copy = (scan - lenb) - (lastscan + lenf);
            chunk->v[chunk->n].seek = (pos - lenb) - (lastpos + lenf);
            if (++chunk->n == CHUNK_ENTRIES) {
                int rc = encoder_submit(enc, chunk);
                chunk = NULL;
                if (rc != 0)
                    return DIFF_ENCODER_FAILED;
            }

            lastscan = scan - lenb;
            lastpos = pos - lenb;
            lastoffset = pos - scan;
        }
    }
    if (chunk != NULL && encoder_submit(enc, chunk) != 0)
        return DIFF_ENCODER_FAILED;
    return DIFF_OK;
}

/* ------------------------------------------------------------------------ */
/* The patch file */

/* The mode a file created with open(..., 0666) would get: mkstemp makes
 * 0600 files, but a published patch should be as readable as bsdiff's. The
 * umask is read from /proc because umask(2) can only be read by setting it,
 * which would race with other threads creating files. */
static mode_t default_file_mode(void)
{
    mode_t mask = 022;
#ifdef __linux__
    FILE *f = fopen("/proc/self/status", "re");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof(line), f) != NULL) {
            unsigned int m;
            if (sscanf(line, "Umask: %o", &m) == 1) {
                mask = (mode_t)(m & 0777);
                break;
            }
        }
        fclose(f);
    }
#endif
    return (mode_t)(0666 & ~mask);
}

/* "<dir of patch_path>/.cbsdiff-XXXXXX": a sibling so rename() is atomic. */
static char *temp_template(const char *patch_path)
{
    static const char suffix[] = ".cbsdiff-XXXXXX";
    const char *slash = strrchr(patch_path, '/');
    size_t dirlen = slash == NULL ? 0 : (size_t)(slash - patch_path) + 1;
    char *t = malloc(dirlen + sizeof(suffix));

    if (t != NULL) {
        memcpy(t, patch_path, dirlen);
        memcpy(t + dirlen, suffix, sizeof(suffix));
    }
    return t;
}

/* Makes the rename durable; best effort, as some file systems refuse fsync
 * on directories. */
static void sync_parent_dir(const char *patch_path)
{
    const char *slash = strrchr(patch_path, '/');
    size_t n = slash == NULL ? 1 : slash == patch_path ? 1 : (size_t)(slash - patch_path);
    char *dir = malloc(n + 1);
    int fd;

    if (dir == NULL)
        return;
    memcpy(dir, slash == NULL ? "." : patch_path, n);
    dir[n] = '\0';
    fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* One call: inputs, output, suffix array, search, patch */

/* Everything one cbsdiff_create call holds; job_close releases it whatever
 * happened. */
typedef struct {
    const char *patch_path;
    uint8_t *old, *nw;
    int64_t oldsize, newsize;
    int32_t *I, *tables;
    matcher mt;
    encoder *enc;
    int enc_ready;
    char *tmp; /* the temporary patch; NULL once renamed or never created */
    int fd;
    uint8_t header[32];
} diff_job;

/* Creates the temporary patch next to patch_path and writes a header whose
 * two stream lengths are filled in at the end. Done before the expensive
 * part so that an unwritable destination fails fast. */
static cbsdiff_status job_create_output(diff_job *j, cbsdiff_error *error)
{
    j->tmp = temp_template(j->patch_path);
    if (j->tmp == NULL) {
        set_error(error, "out of memory");
        return CBSDIFF_ERR_NOMEM;
    }
    j->fd = mkstemp(j->tmp);
    if (j->fd < 0) {
        set_error(error, "cannot create a temporary file next to %s: %s", j->patch_path,
                  strerror(errno));
        free(j->tmp);
        j->tmp = NULL; /* nothing to remove */
        return CBSDIFF_ERR_IO;
    }
    (void)fcntl(j->fd, F_SETFD, FD_CLOEXEC);
    if (fchmod(j->fd, default_file_mode()) != 0) {
        set_error(error, "cannot set the mode of %s: %s", j->tmp, strerror(errno));
        return CBSDIFF_ERR_IO;
    }
    /* Header:
     *   0  8  "BSDIFF40"
     *   8  8  length of the bzip2'ed ctrl block
     *  16  8  length of the bzip2'ed diff block
     *  24  8  length of the new file
     * then the ctrl, diff and extra blocks, each its own bzip2 stream. */
    memcpy(j->header, "BSDIFF40", 8);
    offtout(0, j->header + 8);
    offtout(0, j->header + 16);
    offtout(j->newsize, j->header + 24);
    return write_all(j->fd, j->patch_path, j->header, sizeof(j->header), error);
}

/* Suffix array with the empty suffix first, exactly as qsufsort leaves it in
 * bsdiff 4.3, so the search sees the same array; then the prefix table. */
static cbsdiff_status job_sort(diff_job *j, cbsdiff_error *error)
{
    int rc;

    j->I = big_alloc(((size_t)j->oldsize + 1) * sizeof(int32_t));
    j->tables = malloc(2 * 65536 * sizeof(int32_t));
    if (j->I == NULL || j->tables == NULL) {
        set_error(error, "out of memory for the suffix array (%lld bytes)",
                  (long long)(j->oldsize + 1) * 4);
        return CBSDIFF_ERR_NOMEM;
    }
    j->I[0] = (int32_t)j->oldsize;
    rc = divsufsort(j->old, j->I + 1, (saidx_t)j->oldsize);
    if (rc != 0) {
        set_error(error, "divsufsort failed (error %d)", rc);
        return rc == -2 ? CBSDIFF_ERR_NOMEM : CBSDIFF_ERR_ARGUMENT;
    }
    prefix_table(j->old, j->oldsize, j->tables, j->tables + 65536, &j->mt.one);
    j->mt.I = j->I;
    j->mt.old = j->old;
    j->mt.oldsize = j->oldsize;
    j->mt.nw = j->nw;
    j->mt.newsize = j->newsize;
    j->mt.lo = j->tables;
    j->mt.cnt = j->tables + 65536;
    return CBSDIFF_OK;
}

/* The search, with the encoder compressing on a second thread. */
static cbsdiff_status job_diff(diff_job *j, cbsdiff_error *error)
{
    pthread_t thread;
    sigset_t blocked, saved_mask;
    int threaded = 0, drc;
    cbsdiff_status st;

    j->enc = malloc(sizeof(*j->enc));
    if (j->enc == NULL) {
        set_error(error, "out of memory");
        return CBSDIFF_ERR_NOMEM;
    }
    st = encoder_init(j->enc, j->fd, j->patch_path, j->old, j->nw, error);
    j->enc_ready = 1; /* encoder_destroy undoes a partial init too */
    if (st != CBSDIFF_OK)
        return st;
    /* The encoder thread takes no signals: they stay with the caller's
     * threads, as if there were none. Without a thread (none left?) the
     * encoder runs after the search. */
    sigfillset(&blocked);
    if (pthread_sigmask(SIG_SETMASK, &blocked, &saved_mask) == 0) {
        threaded = pthread_create(&thread, NULL, encoder_main, j->enc) == 0;
        pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
    }

    drc = diff_core(&j->mt, j->enc);
    /* The search is done: give its memory back while the encoder finishes. */
    free(j->I);
    j->I = NULL;
    free(j->tables);
    j->tables = NULL;
    encoder_close(j->enc, drc == DIFF_NOMEM);
    if (threaded)
        pthread_join(thread, NULL);
    else
        encoder_main(j->enc);
    if (drc == DIFF_NOMEM) {
        set_error(error, "out of memory for control tuples");
        return CBSDIFF_ERR_NOMEM;
    }
    if (j->enc->status != CBSDIFF_OK) {
        if (error != NULL)
            memcpy(error, &j->enc->error, sizeof(*error));
        return j->enc->status;
    }
    return CBSDIFF_OK;
}

/* Appends the diff and extra streams, fills in the header's lengths, then
 * fsync, close and rename onto patch_path. */
static cbsdiff_status job_write_patch(diff_job *j, cbsdiff_error *error)
{
    cbsdiff_status st;
    int rc;

    st = write_all(j->fd, j->patch_path, j->enc->diff.mem.data, j->enc->diff.mem.len, error);
    if (st != CBSDIFF_OK)
        return st;
    st = write_all(j->fd, j->patch_path, j->enc->extra.mem.data, j->enc->extra.mem.len, error);
    if (st != CBSDIFF_OK)
        return st;
    offtout((int64_t)j->enc->ctrl.written, j->header + 8);
    offtout((int64_t)j->enc->diff.written, j->header + 16);
    for (;;) {
        ssize_t w = pwrite(j->fd, j->header, sizeof(j->header), 0);
        if (w == (ssize_t)sizeof(j->header))
            break;
        if (w < 0 && errno == EINTR)
            continue;
        set_error(error, "cannot write the header of patch %s: %s", j->patch_path,
                  w < 0 ? strerror(errno) : "short write");
        return CBSDIFF_ERR_IO;
    }
    if (fsync(j->fd) != 0) {
        set_error(error, "cannot fsync patch %s: %s", j->patch_path, strerror(errno));
        return CBSDIFF_ERR_IO;
    }
    rc = close(j->fd);
    j->fd = -1;
    if (rc != 0) {
        set_error(error, "cannot close patch %s: %s", j->patch_path, strerror(errno));
        return CBSDIFF_ERR_IO;
    }
    if (rename(j->tmp, j->patch_path) != 0) {
        set_error(error, "cannot rename the temporary file to %s: %s", j->patch_path,
                  strerror(errno));
        return CBSDIFF_ERR_IO;
    }
    free(j->tmp);
    j->tmp = NULL; /* renamed: must not be unlinked */
    sync_parent_dir(j->patch_path);
    return CBSDIFF_OK;
}

static void job_close(diff_job *j)
{
    if (j->enc_ready)
        encoder_destroy(j->enc);
    free(j->enc);
    if (j->fd >= 0)
        close(j->fd);
    if (j->tmp != NULL) {
        (void)unlink(j->tmp);
        free(j->tmp);
    }
    free(j->tables);
    free(j->I);
    free(j->nw);
    free(j->old);
}

cbsdiff_status cbsdiff_create(const char *old_path, const char *new_path,
                              const char *patch_path, cbsdiff_error *error)
{
    diff_job j;
    cbsdiff_status st;

    trace("start");
    if (error != NULL)
        error->message[0] = '\0';
    if (old_path == NULL || new_path == NULL || patch_path == NULL ||
        old_path[0] == '\0' || new_path[0] == '\0' || patch_path[0] == '\0') {
        set_error(error, "old, new and patch paths must be non-empty");
        return CBSDIFF_ERR_ARGUMENT;
    }
    memset(&j, 0, sizeof(j));
    j.patch_path = patch_path;
    j.fd = -1;

    /* divsufsort takes 32-bit lengths, and I[0] and the prefix table hold
     * values up to oldsize + 1. */
    st = read_file(old_path, "old", (int64_t)INT32_MAX - 1, 1, &j.old, &j.oldsize, error);
    if (st == CBSDIFF_OK)
        st = read_file(new_path, "new", (int64_t)(PTRDIFF_MAX / 2), 0, &j.nw, &j.newsize, error);
    trace("read");
    if (st == CBSDIFF_OK)
        st = job_create_output(&j, error);
    if (st == CBSDIFF_OK)
        st = job_sort(&j, error);
    trace("sort");
    if (st == CBSDIFF_OK)
        st = job_diff(&j, error);
    trace("diff");
    if (st == CBSDIFF_OK)
        st = job_write_patch(&j, error);
    trace("write");
    job_close(&j);
    return st;
}
