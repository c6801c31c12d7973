/*
 * bsp_streams.h: the threads of CBspatch, internal to the target.
 *
 *   stream.c    each of the three bzip2 streams (control, diff, extra) is
 *               decoded ahead by worker threads into rings of fixed slots
 *               that the main thread reads in order;
 *   prefetch.c  the control stream's worker also reads ahead the old bytes
 *               that the triples add to.
 * Our own design (bsdiff 4.3 decodes the streams one after the other in the
 * calling thread); see stream.c for how it stays deadlock-free.
 */
#ifndef BSP_STREAMS_H
#define BSP_STREAMS_H

#include "bsp_bzip2.h"

#include <pthread.h>

#pragma GCC visibility push(hidden)

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
    cbsp_old_source old;
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

/* ------------------------------------------------------------------------ */
/* stream.c                                                                 */

/* Internal result of cbsp_stream_peek when the stream ended cleanly with
   nothing left; the caller turns it into a message that says what was still
   needed. */
#define STREAM_EOF (-1)

/* Starts `nworkers` threads decoding patch bytes [offset, offset + length);
   the first `fast_workers` use cbz's fast block layout; touch_arena: see
   worker_main; pf: the control stream's prefetch, or NULL. On failure the
   stream is still safe to destroy. */
cbspatch_status cbsp_stream_start(stream *st, const char *name, int fd, int64_t offset, int64_t length,
                                  unsigned nworkers, unsigned nslots, unsigned fast_workers, int touch_arena,
                                  prefetch *pf, cbspatch_error *error);
/* Cancels and joins the workers (idempotent). */
void cbsp_stream_stop_workers(stream *st);
/* Stops the workers and frees everything; safe on a partly started stream. */
void cbsp_stream_destroy(stream *st);
/* Makes at least one byte available at st->cursor, waiting for the workers.
   Returns CBSPATCH_OK, STREAM_EOF, or an error status (with message). */
int cbsp_stream_peek(stream *st, cbspatch_error *error);

static inline void stream_take(stream *st, size_t n) {
    st->cursor += n;
    st->available -= n;
    st->delivered += n;
}

/* ------------------------------------------------------------------------ */
/* prefetch.c                                                               */

/* Producer side, on the control stream's worker. */
void cbsp_prefetch_parse(prefetch *pf, const uint8_t *bytes, size_t n);
int cbsp_prefetch_read(stream *st, prefetch *pf);
void cbsp_prefetch_finish(stream *st, prefetch *pf);

/* Consumer side, on the main thread: points *data at the next 1..want old
   bytes (*got = 1) or says the prefetch is over and old must be read directly
   (*got = 0). After using n bytes call cbsp_prefetch_consume. */
cbspatch_status cbsp_prefetch_take(stream *ctrl, prefetch *pf, size_t want, const uint8_t **data, size_t *n, int *got,
                                   cbspatch_error *error);

static inline void cbsp_prefetch_consume(prefetch *pf, size_t n) {
    pf->cursor += n;
    pf->available -= n;
}

#pragma GCC visibility pop

#endif /* BSP_STREAMS_H */
