/*
 * bz_libbz2.c: libbz2, fed straight from the patch file, and the memory arena
 * both bzip2 decoders draw from.
 *
 * libbz2 (bzip2, Copyright 1996-2019 Julian R Seward, under the bzip2 licence,
 * a BSD-style licence; see NOTICE) is linked from the system, not vendored.
 * It is the reference decoder: it decodes any stream that cbz (bz_fast.c)
 * declines, so cbz can change the speed of an apply, never its result.
 *
 * Changed from bsdiff 4.3's bspatch, which opens the patch three times with
 * BZ2_bzReadOpen and exits on any error: each stream is decoded from its own
 * byte range with pread (no shared file offset, so worker threads can share
 * the descriptor), a stream that ends before its end-of-stream mark or makes
 * no progress is refused, every error is a status with a message, and
 * libbz2's memory comes from an arena allocated once per worker (small mode),
 * so memory stays bounded and nothing is allocated while decoding.
 */
#include "bsp_bzip2.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Decoder memory: one arena per worker, allocated once per apply. It holds  */
/* cbz's block array, or, if the stream falls back, everything libbz2       */
/* allocates (served by arena_alloc), so no decoder mallocs while running.  */

/* cbz's links for a level-9 block (2.5 bytes a symbol), or the same arrays
   plus its DState for libbz2 in small mode. */
static size_t arena_size(int fast) {
    size_t arrays = fast ? (size_t)CBZ_BLOCK_MAX * 4 : (size_t)CBZ_BLOCK_MAX * 2 + CBZ_BLOCK_MAX / 2;
    return (arrays + 96 * 1024 + 4095) & ~(size_t)4095;
}

int cbsp_arena_init(bz_arena *a, int fast) {
    a->size = arena_size(fast);
    a->used = 0;
    a->live = 0;
    a->base = malloc(a->size);
    return a->base == NULL ? -1 : 0;
}

void cbsp_arena_destroy(bz_arena *a) {
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
/* libbz2 on one stream of the patch file.                                   */

int cbsp_region_bits(int fd, int64_t region_offset, int64_t region_length, int64_t bit, int n, uint64_t *value) {
    if (bit < 0 || n < 1 || n > 56 || bit + n > region_length * 8) return -1;
    int64_t first = bit / 8, last = (bit + n - 1) / 8;
    uint8_t bytes[8];
    size_t count = (size_t)(last - first + 1);
    if (cbsp_pread_full(fd, bytes, count, region_offset + first) != (ssize_t)count) return -1;
    uint64_t window = 0;
    for (size_t i = 0; i < count; i++) window = (window << 8) | bytes[i];
    int skip = (int)(bit % 8);
    int total = (int)count * 8;
    *value = (window >> (total - skip - n)) & ((UINT64_C(1) << n) - 1);
    return 0;
}

int cbsp_decoder_begin(decoder *d, cbspatch_status *status, char *message) {
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

void cbsp_decoder_end(decoder *d) {
    if (d->ready) BZ2_bzDecompressEnd(&d->bz);
    d->ready = 0;
}

/* Refills d->input; returns bytes placed (0 = no more input) or -1 on an I/O error. */
static ssize_t decoder_fill(decoder *d, cbspatch_status *status, char *message) {
    if (d->input_left == 0) return 0;
    size_t want = d->input_left < INPUT_CHUNK ? (size_t)d->input_left : (size_t)INPUT_CHUNK;
    ssize_t r = cbsp_pread_full(d->fd, d->input, want, d->next_offset);
    if (r <= 0) {
        *status = CBSPATCH_ERR_IO;
        if (r < 0)
            snprintf(message, MSG_SIZE, "reading the %s stream at offset %lld: %s", d->name, (long long)d->next_offset,
                     strerror(errno));
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
int cbsp_decoder_run(decoder *d, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status,
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
            snprintf(message, MSG_SIZE, "%s stream: compressed data ends before the bzip2 end-of-stream mark", d->name);
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
