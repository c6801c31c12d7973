/*
 * prefetch.c: the old bytes each triple adds to, read ahead by the control
 * stream's worker (which has the triples first and is otherwise idle) into a
 * ring of slots: bsdiff matches are short and scattered all over old, so
 * these are thousands of small preads that would otherwise sit on the main
 * thread. The main thread takes the bytes in order; when the prefetch stops
 * (the control stream fell back to libbz2, or the triples went wrong) it
 * reads old itself. Shares the control stream's mutex and condition.
 *
 * Our own design, under the project's licence (bsdiff 4.3's bspatch loads old
 * whole into memory; CBspatch reads only what the triples use, so memory does
 * not grow with old). The prefetcher decides with the same triple check as
 * the main thread (cbsp_triple_check), so it never reads what the main
 * thread would refuse, and it stops at the first refused triple.
 */
#include "bsp_streams.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Parses control bytes (before they are published) into the reads they imply. */
void cbsp_prefetch_parse(prefetch *pf, const uint8_t *bytes, size_t n) {
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
        int64_t x = cbsp_offtin(pf->partial), y = cbsp_offtin(pf->partial + 8), z = cbsp_offtin(pf->partial + 16);
        int64_t next_new, next_old;
        if (cbsp_triple_check(pf->newpos, pf->oldpos, x, y, z, pf->new_size, pf->old_size, &next_new, &next_old) !=
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

/* Performs the parsed reads into the ring; returns -1 when cancelled.
   Parsing may have stopped at a later triple of the same control slot, but the
   reads of the triples before it are still done: the main thread needs them
   before it meets (and refuses) that triple. */
int cbsp_prefetch_read(stream *st, prefetch *pf) {
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
            ssize_t got = cbsp_old_read(&pf->old, dst, want, pos);
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
    if (pf->stopped) cbsp_prefetch_finish(st, pf);
    return 0;
}

/* Publishes what is left and tells the reader there is no more (once). */
void cbsp_prefetch_finish(stream *st, prefetch *pf) {
    if (pf->finished) return;
    pf->finished = 1;
    if (pf->slot >= 0 && pf->slot_fill > 0) prefetch_publish(st, pf);
    if (pf->slots_touched < PREFETCH_SLOTS) /* never used, so free to touch: see worker_main */
        cbsp_touch_pages(pf->slots + (size_t)pf->slots_touched * SLOT_SIZE,
                         (size_t)(PREFETCH_SLOTS - pf->slots_touched) * SLOT_SIZE);
    pthread_mutex_lock(&st->mutex);
    pf->done = 1;
    pthread_cond_broadcast(&st->changed);
    pthread_mutex_unlock(&st->mutex);
}

cbspatch_status cbsp_prefetch_take(stream *ctrl, prefetch *pf, size_t want, const uint8_t **data, size_t *n, int *got,
                                   cbspatch_error *error) {
    *got = 0;
    if (!pf->abandoned && (ctrl->fallback || ctrl->pf == NULL)) pf->abandoned = 1; /* its worker is gone */
    if (pf->abandoned) return CBSPATCH_OK;
    if (!(pf->holding && pf->available > 0)) {
        pthread_mutex_lock(&ctrl->mutex);
        if (pf->holding) {
            pf->head = (pf->head + 1) % PREFETCH_SLOTS;
            pf->count--;
            pf->holding = 0;
            pthread_cond_broadcast(&ctrl->changed);
        }
        while (pf->count == 0 && !pf->done) pthread_cond_wait(&ctrl->changed, &ctrl->mutex);
        if (pf->count > 0) {
            pf->cursor = pf->slots + (size_t)pf->head * SLOT_SIZE;
            pf->available = pf->fill[pf->head];
            pf->holding = 1;
        } else if (pf->status != CBSPATCH_OK) {
            cbspatch_status status = pf->status;
            if (error != NULL) memcpy(error->message, pf->message, MSG_SIZE);
            pthread_mutex_unlock(&ctrl->mutex);
            return status;
        } else {
            pf->abandoned = 1; /* stopped early: read the rest here */
        }
        pthread_mutex_unlock(&ctrl->mutex);
    }
    if (pf->abandoned) return CBSPATCH_OK;
    *data = pf->cursor;
    *n = pf->available < want ? pf->available : want;
    *got = 1;
    return CBSPATCH_OK;
}
