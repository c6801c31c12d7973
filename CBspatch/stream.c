/*
 * stream.c: each bzip2 stream of the patch is decoded ahead by its own
 * worker thread(s) into rings of fixed slots that the main thread reads in
 * order.
 *
 * With one worker, the worker decodes the stream as it is ("raw"). With more,
 * the stream is split into its bzip2 blocks by finding the 48-bit block marks
 * (libbz2's block layout: every block starts with the mark 0x314159265359 and
 * its CRC, and the stream ends with 0x177245385090 and the combined CRC, with
 * no byte alignment), and each worker claims the next block ("piece"),
 * decodes it with cbz into its own ring, and claims another; the main thread
 * reads pieces in order from whichever ring holds them. If cbz declines a
 * block (or a split turns out wrong: a mark-like bit pattern inside a block,
 * a CRC that does not add up) before any of its output was used, the main
 * thread stops the workers and has libbz2 decode the rest of the stream,
 * sequentially, as the reference would: cbz and splitting only ever change
 * speed, never the result.
 *
 * Deadlock freedom: a worker only waits for room in its own ring (or the
 * prefetch ring), which the main thread drains in order, and publishes
 * everything the main thread could need before it waits.
 *
 * Our own design, under the project's licence: bsdiff 4.3's bspatch (Colin
 * Percival, BSD-2-Clause) decodes the three streams one after the other in
 * the calling thread; the block layout is bzip2's (Julian Seward, bzip2
 * licence; see NOTICE), read here, not copied.
 */
#include "bsp_streams.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        ssize_t got = cbsp_pread_full(st->fd, st->scan_buffer, want, st->offset + byte);
        if (got != (ssize_t)want) return -1;
        memset(st->scan_buffer + want, 0, SCAN_CHUNK + 16 - want); /* the tail's windows read zeros */
        size_t usable = want > 8 ? want - 8 : 0;                   /* windows that fit in what was read... */
        if (byte + (int64_t)want == region) usable = want;         /* ...or the region's tail */
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
        if (cbsp_region_bits(st->fd, st->offset, st->length, 0, 32, &v) != 0 || (v >> 8) != 0x425a68u /* "BZh" */ ||
            (v & 0xff) < '1' || (v & 0xff) > '9') {
            snprintf(job->message, MSG_SIZE, "%s stream: no bzip2 header to split at", st->name);
            return SCAN_ANOMALY;
        }
        st->level = (int)(v & 0xff) - '0';
        st->scan_bit = 32;
        if (cbsp_region_bits(st->fd, st->offset, st->length, 32, 48, &v) != 0 || (v != BLOCK_MAGIC && v != EOS_MAGIC)) {
            snprintf(job->message, MSG_SIZE, "%s stream: no bzip2 block after the header", st->name);
            return SCAN_ANOMALY;
        }
        st->at_eos = v == EOS_MAGIC;
    }
    if (st->at_eos) {
        if (cbsp_region_bits(st->fd, st->offset, st->length, st->scan_bit + 48, 32, &v) != 0 ||
            (uint32_t)v != st->combined_crc) {
            snprintf(job->message, MSG_SIZE, "%s stream: combined CRC does not match its blocks", st->name);
            return SCAN_ANOMALY;
        }
        return SCAN_END;
    }
    if (cbsp_region_bits(st->fd, st->offset, st->length, st->scan_bit + 48, 32, &v) != 0) {
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
    if (st->next_piece == 1 && kind == 0 && __atomic_load_n(&cbsp_testing_fake_split, __ATOMIC_RELAXED)) found -= 1;
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
    cbsp_touch_pages(w->arena.base + from, n);
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
                if (pf != NULL) cbsp_prefetch_parse(pf, out, fill);
                worker_publish(w, slot, fill, 0);
                if (pf != NULL && cbsp_prefetch_read(st, pf) < 0) return NULL;
                fill = 0;
                slot = worker_slot(w);
                if (slot < 0) return NULL;
            }
        }
        if (pf != NULL) cbsp_prefetch_parse(pf, w->slots + (size_t)slot * SLOT_SIZE, fill);
        if (result == DECODE_ERROR) {
            pthread_mutex_lock(&st->mutex);
            w->status = status;
            memcpy(w->message, message, MSG_SIZE);
            w->may_fall_back = may_fall_back;
            pthread_mutex_unlock(&st->mutex);
            worker_publish(w, slot, fill, SLOT_LAST | SLOT_ERROR);
            if (pf != NULL && cbsp_prefetch_read(st, pf) == 0) cbsp_prefetch_finish(st, pf);
            return NULL;
        }
        worker_publish(w, slot, fill, SLOT_LAST);
        if (pf != NULL && cbsp_prefetch_read(st, pf) < 0) return NULL;
        w->decoded = 1;
    }
    if (pf != NULL) cbsp_prefetch_finish(st, pf);
    if (w->decoded) {
        /* Memory use should not depend on the package: how much of a ring or
           block array a stream uses depends on its length (a small package
           fills none). A worker that decoded a stream touches its slots that
           were never used once done (the others may still hold data), and the
           extra stream's first worker its whole block array: that evens out
           what small and large packages use, on time that is otherwise idle. */
        if (st->touch_arena && w->index == 0) cbsp_touch_pages(w->arena.base, w->arena.size);
        if (w->slots_touched < w->nslots)
            cbsp_touch_pages(w->slots + (size_t)w->slots_touched * SLOT_SIZE,
                             (size_t)(w->nslots - w->slots_touched) * SLOT_SIZE);
    }
    return NULL;
}

void cbsp_stream_stop_workers(stream *st) {
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
void cbsp_stream_destroy(stream *st) {
    cbsp_stream_stop_workers(st);
    cbsp_decoder_end(&st->fb);
    for (unsigned i = 0; i < st->nworkers; i++) {
        worker *w = &st->workers[i];
        cbsp_decoder_end(&w->dec);
        cbsp_arena_destroy(&w->arena);
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

cbspatch_status cbsp_stream_start(stream *st, const char *name, int fd, int64_t offset, int64_t length,
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
        return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "cannot create a mutex for the %s stream", name);
    if (pthread_mutex_init(&st->claim_mutex, NULL) != 0) {
        pthread_mutex_destroy(&st->mutex);
        return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "cannot create a mutex for the %s stream", name);
    }
    if (pthread_cond_init(&st->changed, NULL) != 0) {
        pthread_mutex_destroy(&st->claim_mutex);
        pthread_mutex_destroy(&st->mutex);
        return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "cannot create a condition for the %s stream", name);
    }
    st->sync_ready = 1;
    cbz_init_tables();
    if (nworkers > 1) {
        pthread_once(&magic_filter_once, magic_filter_build);
        st->scan_buffer = malloc(SCAN_CHUNK + 16);
        if (st->scan_buffer == NULL)
            return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream", name);
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
            cbsp_arena_init(&w->arena, fast) != 0)
            return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream buffers", name);
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
        return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "cannot create thread attributes for the %s stream", name);
    size_t stack = THREAD_STACK;
#ifdef PTHREAD_STACK_MIN
    if (stack < (size_t)PTHREAD_STACK_MIN) stack = (size_t)PTHREAD_STACK_MIN;
#endif
    (void)pthread_attr_setstacksize(&attr, stack); /* a hint: the default also works */
    for (unsigned i = 0; i < nworkers; i++) {
        int ret = pthread_create(&st->workers[i].thread, &attr, worker_main, &st->workers[i]);
        if (ret != 0) {
            pthread_attr_destroy(&attr);
            return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "cannot start a %s stream decoder thread: %s", name,
                             strerror(ret));
        }
        st->workers[i].thread_started = 1;
    }
    pthread_attr_destroy(&attr);
    return CBSPATCH_OK;
}

/* The split went wrong: stop the workers, decode from the start of the stream
   in this thread and skip what was already delivered. */
static int stream_fall_back(stream *st, cbspatch_error *error) {
    cbsp_stream_stop_workers(st);
    st->fallback = 1;
    worker *w0 = &st->workers[0];
    cbsp_decoder_end(&w0->dec); /* workers end their decoders, but be sure */
    st->fb = w0->dec;           /* reuses worker 0's arena and input buffer */
    st->fb.ready = 0;
    st->fb_out = malloc(SLOT_SIZE);
    cbspatch_status status = CBSPATCH_OK;
    char message[MSG_SIZE];
    if (st->fb_out == NULL) return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory for the %s stream", st->name);
    if (cbsp_decoder_begin(&st->fb, &status, message) != 0) return cbsp_fail(error, status, "%s", message);
    uint64_t skip = st->delivered;
    while (skip > 0) {
        size_t want = skip < SLOT_SIZE ? (size_t)skip : (size_t)SLOT_SIZE, produced = 0;
        int r = cbsp_decoder_run(&st->fb, st->fb_out, want, &produced, &status, message);
        if (r == DECODE_ERROR) return cbsp_fail(error, status, "%s", message);
        skip -= produced;
        if (r == DECODE_END && skip > 0)
            return cbsp_fail(error, CBSPATCH_ERR_BZIP2, "%s stream decodes differently on a second pass", st->name);
        if (r == DECODE_END) st->fallback_done = 1;
    }
    st->holding = 0;
    st->available = 0;
    return CBSPATCH_OK;
}

static int stream_fallback_peek(stream *st, cbspatch_error *error) {
    for (;;) {
        if (st->fb_status != CBSPATCH_OK) return cbsp_fail(error, st->fb_status, "%s", st->fb_message);
        if (st->fallback_done) return STREAM_EOF;
        cbspatch_status status = CBSPATCH_OK;
        size_t produced = 0;
        int r = cbsp_decoder_run(&st->fb, st->fb_out, SLOT_SIZE, &produced, &status, st->fb_message);
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
int cbsp_stream_peek(stream *st, cbspatch_error *error) {
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
