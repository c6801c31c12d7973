/*
 * apply.c: the apply loop of CBspatch and its public entry points
 * (cbspatch_apply, cbspatch_apply_flags; see include/cbspatch.h).
 *
 * The loop is bsdiff 4.3's bspatch (Copyright 2003-2005 Colin Percival,
 * BSD-2-Clause; licence text in NOTICE): for each control triple (x, y, z),
 * new gets x bytes of old plus diff, then y bytes of extra, and the old
 * cursor moves by z.
 *
 * Changed from bsdiff 4.3, for hardening and bounded memory:
 *   - every triple is validated before any of it is used (patch_format.c),
 *     runs of triples that produce nothing are cut off (CBSPATCH_ERR_STALL),
 *     and each stream must end exactly where the triples stop using it, so
 *     CRCs and end marks are checked and a bzip2 bomb is not decoded;
 *   - every failure is a status and a message, never a process exit;
 *   - old is read with pread (prefetched by the control stream's worker,
 *     prefetch.c) and new is written sequentially through a buffer: nothing
 *     is loaded whole, so memory stays at about 14 MB whatever the sizes;
 *   - the streams are decoded ahead by worker threads (stream.c);
 *   - new goes through a write callback: to a temporary file in the target
 *     directory, fsynced and renamed onto the target only on success, or to
 *     the caller's writer (cbspatch_apply_reader_writer).
 */
#include "bsp_streams.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    cbsp_old_source source;
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
        ssize_t got = cbsp_old_read(&r->source, r->buffer, (size_t)length, pos);
        if (got < 0)
            return cbsp_fail(error, CBSPATCH_ERR_IO, "reading old at %lld: %s", (long long)pos, strerror(errno));
        if ((int64_t)got != length)
            return cbsp_fail(error, CBSPATCH_ERR_IO, "old file shrank while patching (short read at %lld)",
                             (long long)pos);
        r->start = pos;
        r->length = (size_t)length;
    }
    size_t offset = (size_t)(pos - r->start);
    size_t have = r->length - offset;
    *data = r->buffer + offset;
    *n = have < want ? have : want;
    return CBSPATCH_OK;
}

/* Where new goes: every apply writes through a cbspatch_write_fn. The file
   outputs (cbspatch_apply, _flags, _reader) use file_sink below; callers of
   cbspatch_apply_reader_writer bring their own. One apply loop either way. */
typedef struct {
    cbspatch_write_fn write;
    void *context;
    uint8_t *buffer;
    size_t length;
    int64_t written;
} new_writer;

static cbspatch_status new_flush(new_writer *w, cbspatch_error *error) {
    if (w->length == 0) return CBSPATCH_OK;
    int r = w->write(w->context, w->buffer, w->length);
    if (r > 0)
        return cbsp_fail(error, CBSPATCH_ERR_STOPPED, "the output's writer stopped the apply at new position %lld",
                         (long long)w->written);
    if (r != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "writing new at %lld: %s", (long long)w->written, strerror(errno));
    w->written += (int64_t)w->length;
    w->length = 0;
    return CBSPATCH_OK;
}

/* The file output: sequential writes to the temporary file. */
typedef struct {
    int fd;
    int64_t written;
    int64_t writeback_mark;
    int durable; /* fsync before the rename (and start writeback early) */
} file_sink;

static int file_sink_write(void *context, const void *buffer, size_t length) {
    file_sink *f = context;
    if (cbsp_write_full(f->fd, buffer, length) != 0) return -1;
    f->written += (int64_t)length;
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    if (f->durable && WRITEBACK_STEP > 0 && f->written - f->writeback_mark >= WRITEBACK_STEP) {
        /* Only starts writeback of what is already written (no waiting), so
           the fsync before rename has less left to do. Failure is harmless. */
        (void)sync_file_range(f->fd, f->writeback_mark, f->written - f->writeback_mark, SYNC_FILE_RANGE_WRITE);
        f->writeback_mark = f->written;
    }
#endif
    return 0;
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
   while it runs (then cbsp_prefetch_consume must be called with what was
   used), else read here. `wanted_total` (>= want) is what the triple still
   needs from pos on. */
static cbspatch_status old_fetch(apply_state *s, int64_t pos, size_t want, int64_t wanted_total, const uint8_t **data,
                                 size_t *n, int *from_prefetch, cbspatch_error *error) {
    *from_prefetch = 0;
    if (s->pf != NULL) {
        cbspatch_status status = cbsp_prefetch_take(&s->ctrl, s->pf, want, data, n, from_prefetch, error);
        if (status != CBSPATCH_OK || *from_prefetch) return status;
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
            int r = cbsp_stream_peek(&s->diff, error);
            if (r == STREAM_EOF)
                return cbsp_fail(error, CBSPATCH_ERR_TRUNCATED,
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
        if (from_prefetch) cbsp_prefetch_consume(s->pf, n);
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
        int r = cbsp_stream_peek(&s->extra, error);
        if (r == STREAM_EOF)
            return cbsp_fail(error, CBSPATCH_ERR_TRUNCATED,
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
        int r = cbsp_stream_peek(&s->ctrl, error);
        if (r == STREAM_EOF) {
            if (have == 0)
                return cbsp_fail(error, CBSPATCH_ERR_TRUNCATED,
                                 "control stream ended after %llu triples at new position %lld of %lld",
                                 (unsigned long long)index, (long long)newpos, (long long)s->new_size);
            return cbsp_fail(error, CBSPATCH_ERR_TRUNCATED,
                             "control stream ends inside triple %llu (%zu of 24 bytes) at new position %lld of %lld",
                             (unsigned long long)index, have, (long long)newpos, (long long)s->new_size);
        }
        if (r != CBSPATCH_OK) return (cbspatch_status)r;
        size_t k = sizeof raw - have < s->ctrl.available ? sizeof raw - have : s->ctrl.available;
        memcpy(raw + have, s->ctrl.cursor, k);
        stream_take(&s->ctrl, k);
        have += k;
    }
    triple[0] = cbsp_offtin(raw);
    triple[1] = cbsp_offtin(raw + 8);
    triple[2] = cbsp_offtin(raw + 16);
    return CBSPATCH_OK;
}

/* After the last triple: the stream must end cleanly with no bytes left over. */
static cbspatch_status expect_end(stream *p, cbspatch_error *error) {
    int r = cbsp_stream_peek(p, error);
    if (r == STREAM_EOF) return CBSPATCH_OK;
    if (r != CBSPATCH_OK) return (cbspatch_status)r;
    return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "%s stream goes on past the %llu bytes the control triples use",
                     p->name, (unsigned long long)p->delivered);
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

        /* Validate the whole triple before using any of it. */
        if (x == 0 && y == 0) {
            /* A few bytes of bzip2 can expand into billions of these. */
            if (++idle > CBSPATCH_MAX_IDLE_TRIPLES)
                return cbsp_fail(error, CBSPATCH_ERR_STALL,
                                 "control stream stalls: more than %d consecutive triples produce no output "
                                 "(at new position %lld)",
                                 CBSPATCH_MAX_IDLE_TRIPLES, (long long)newpos);
        } else {
            idle = 0;
        }
        int64_t next_new = 0, next_old = 0;
        triple_verdict verdict =
            cbsp_triple_check(newpos, oldpos, x, y, z, s->new_size, s->old.size, &next_new, &next_old);
        if (verdict != TRIPLE_OK)
            return cbsp_triple_refusal(verdict, index, newpos, oldpos, t, s->new_size, s->old.size, error);

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

/* ------------------------------------------------------------------------ */
/* One call: inputs, state, temporary file, decode, commit                   */

/* Everything one call holds; apply_job_close releases it whatever happened. */
typedef struct {
    int patch_fd, old_fd, tmp_fd;
    cbspatch_read_fn read_old; /* when set, old comes from it, not old_fd */
    void *read_context;
    char *tmp_path, *dir; /* tmp_path: NULL once renamed or never created */
    apply_state *s;
    patch_header h;
    int64_t old_size;
    file_sink file; /* the output when no writer is given */
} apply_job;

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
    snprintf(path, size, "%s%s.%s.cbspatch-XXXXXX", dir_copy, (dir_len == 1 && dir_copy[0] == '/') ? "" : "/", base);
    *dir_out = dir_copy;
    return path;
}

cbspatch_status cbspatch_apply(const char *old_path, const char *patch_path, const char *new_path,
                               int64_t expected_new_size, cbspatch_error *error) {
    return cbspatch_apply_flags(old_path, patch_path, new_path, expected_new_size, 0, error);
}

static cbspatch_status check_arguments(const char *old_path, const char *patch_path, const char *new_path,
                                       unsigned flags, cbspatch_error *error) {
    if ((flags & ~(unsigned)CBSPATCH_NO_SYNC) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "unknown flags %#x", flags);
    if (old_path == NULL || old_path[0] == '\0') return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "old path is empty");
    if (patch_path == NULL || patch_path[0] == '\0')
        return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "patch path is empty");
    if (new_path == NULL || new_path[0] == '\0') return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "new path is empty");
    size_t new_len = strlen(new_path);
    if (new_path[new_len - 1] == '/')
        return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "new path %s names a directory", new_path);
    return CBSPATCH_OK;
}

/* Opens the patch (header checked, new size as expected). */
static cbspatch_status open_patch(apply_job *j, const char *patch_path, int64_t expected_new_size,
                                  cbspatch_error *error) {
    j->patch_fd = cbsp_open_retry(patch_path, O_RDONLY | O_CLOEXEC);
    if (j->patch_fd < 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot open patch %s: %s", patch_path, strerror(errno));
    cbspatch_status status = cbsp_read_header_fd(j->patch_fd, patch_path, &j->h, error);
    if (status != CBSPATCH_OK) return status;
    if (expected_new_size >= 0 && j->h.new_size != expected_new_size)
        return cbsp_fail(error, CBSPATCH_ERR_SIZE_MISMATCH, "patch makes %lld bytes but %lld are expected",
                         (long long)j->h.new_size, (long long)expected_new_size);
    return CBSPATCH_OK;
}

/* Opens the patch (header checked, new size as expected) and old. */
static cbspatch_status open_inputs(apply_job *j, const char *old_path, const char *patch_path,
                                   int64_t expected_new_size, cbspatch_error *error) {
    cbspatch_status status = open_patch(j, patch_path, expected_new_size, error);
    if (status != CBSPATCH_OK) return status;
    j->old_fd = cbsp_open_retry(old_path, O_RDONLY | O_CLOEXEC);
    if (j->old_fd < 0) return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot open old %s: %s", old_path, strerror(errno));
    struct stat old_st;
    if (fstat(j->old_fd, &old_st) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot stat old %s: %s", old_path, strerror(errno));
    if (S_ISDIR(old_st.st_mode)) return cbsp_fail(error, CBSPATCH_ERR_IO, "old %s is a directory", old_path);
    j->old_size = (int64_t)old_st.st_size;
    return CBSPATCH_OK;
}

/* The buffers the main thread and the prefetch use, all allocated up front. */
static cbspatch_status alloc_state(apply_job *j, cbspatch_error *error) {
    apply_state *s = calloc(1, sizeof *s);
    j->s = s;
    if (s == NULL) return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory");
    s->new_size = j->h.new_size;
    cbsp_old_source source = {j->old_fd, j->read_old, j->read_context};
    s->old.source = source;
    s->old.size = j->old_size;
    s->old.buffer = malloc(OLD_WINDOW);
    s->out.buffer = malloc(OUT_BUFFER);
    s->pf = calloc(1, sizeof *s->pf);
    if (s->pf != NULL) {
        s->pf->slots = malloc((size_t)PREFETCH_SLOTS * SLOT_SIZE);
        s->pf->reads = malloc((size_t)PREFETCH_READS * sizeof *s->pf->reads);
        s->pf->old = source;
        s->pf->new_size = j->h.new_size;
        s->pf->old_size = j->old_size;
        s->pf->slot = -1;
    }
    if (s->old.buffer == NULL || s->out.buffer == NULL || s->pf == NULL || s->pf->slots == NULL || s->pf->reads == NULL)
        return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory for buffers");
    return CBSPATCH_OK;
}

/* The temporary file new is written to, next to new_path. */
static cbspatch_status create_temp(apply_job *j, const char *new_path, unsigned flags, cbspatch_error *error) {
    j->tmp_path = temp_template(new_path, &j->dir);
    if (j->tmp_path == NULL) return cbsp_fail(error, CBSPATCH_ERR_NOMEM, "out of memory");
    j->tmp_fd = mkostemp(j->tmp_path, O_CLOEXEC);
    if (j->tmp_fd < 0) {
        cbspatch_status status =
            cbsp_fail(error, CBSPATCH_ERR_IO, "cannot create a temporary file in %s: %s", j->dir, strerror(errno));
        free(j->tmp_path);
        j->tmp_path = NULL; /* nothing to remove */
        return status;
    }
    if (fchmod(j->tmp_fd, 0644) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot chmod %s: %s", j->tmp_path, strerror(errno));
    j->file.fd = j->tmp_fd;
    j->file.durable = (flags & CBSPATCH_NO_SYNC) == 0;
    j->s->out.write = file_sink_write;
    j->s->out.context = &j->file;
    return CBSPATCH_OK;
}

/* Starts the three streams' workers, runs the triples, joins everything. */
static cbspatch_status decode_and_apply(apply_job *j, cbspatch_error *error) {
    apply_state *s = j->s;
    const patch_header *h = &j->h;
    int patch_fd = j->patch_fd;
    cbspatch_status status = CBSPATCH_OK;
    int64_t ctrl_at = HEADER_SIZE, diff_at = ctrl_at + h->ctrl_len, extra_at = diff_at + h->diff_len;
    /* The diff stream starts first: for stored packages it is the longest
       single chain of work. The extra stream's first worker touches its
       whole block array once done (see worker_main): it finishes early
       unless the extra stream is what decides the time, and then its
       array is full anyway. */
    int diff_fast = CBSPATCH_DIFF_FAST || h->new_size <= CBSPATCH_DIFF_FAST_BELOW;
    status = cbsp_stream_start(&s->diff, "diff", patch_fd, diff_at, h->diff_len, 1, CBSPATCH_DIFF_SLOTS, diff_fast, 0,
                               NULL, error);
    if (status == CBSPATCH_OK)
        status = cbsp_stream_start(&s->ctrl, "control", patch_fd, ctrl_at, h->ctrl_len, 1, CBSPATCH_CTRL_SLOTS, 0, 0,
                                   CBSPATCH_PREFETCH ? s->pf : NULL, error);
    if (status == CBSPATCH_OK)
        status = cbsp_stream_start(&s->extra, "extra", patch_fd, extra_at, h->file_size - extra_at,
                                   CBSPATCH_EXTRA_WORKERS, CBSPATCH_EXTRA_SLOTS, CBSPATCH_EXTRA_FAST, 1, NULL, error);
    if (status == CBSPATCH_OK) status = run_patch(s, error);
    /* Join every worker before freeing anything, so the peak footprint
       does not depend on which stream finished first. */
    cbsp_stream_stop_workers(&s->ctrl);
    cbsp_stream_stop_workers(&s->diff);
    cbsp_stream_stop_workers(&s->extra);
    cbsp_stream_destroy(&s->ctrl);
    cbsp_stream_destroy(&s->diff);
    cbsp_stream_destroy(&s->extra);
    return status;
}

/* fsync (unless CBSPATCH_NO_SYNC), close and rename onto new_path. */
static cbspatch_status commit_temp(apply_job *j, const char *new_path, unsigned flags, cbspatch_error *error) {
    if ((flags & CBSPATCH_NO_SYNC) == 0 && fsync(j->tmp_fd) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "fsync %s: %s", j->tmp_path, strerror(errno));
    int close_result = close(j->tmp_fd);
    j->tmp_fd = -1;
    if (close_result != 0) return cbsp_fail(error, CBSPATCH_ERR_IO, "close %s: %s", j->tmp_path, strerror(errno));
    if (rename(j->tmp_path, new_path) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot rename %s to %s: %s", j->tmp_path, new_path, strerror(errno));
    free(j->tmp_path);
    j->tmp_path = NULL;
    /* The directory is not fsynced: callers that need the rename itself to
       survive a crash sync the directory (it costs a journal commit, and a
       caller that writes several files needs only one). */
    return CBSPATCH_OK;
}

/* Closes and frees whatever the job holds; removes the temporary file unless
   it was renamed onto the target. */
static void apply_job_close(apply_job *j) {
    if (j->tmp_fd >= 0) close(j->tmp_fd);
    if (j->tmp_path != NULL) unlink(j->tmp_path);
    apply_state *s = j->s;
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
    free(j->tmp_path);
    free(j->dir);
    if (j->old_fd >= 0) close(j->old_fd);
    if (j->patch_fd >= 0) close(j->patch_fd);
}

cbspatch_status cbspatch_apply_flags(const char *old_path, const char *patch_path, const char *new_path,
                                     int64_t expected_new_size, unsigned flags, cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    cbspatch_status status = check_arguments(old_path, patch_path, new_path, flags, error);
    if (status != CBSPATCH_OK) return status;
    apply_job j;
    memset(&j, 0, sizeof j);
    j.patch_fd = j.old_fd = j.tmp_fd = -1;
    status = open_inputs(&j, old_path, patch_path, expected_new_size, error);
    if (status == CBSPATCH_OK) status = alloc_state(&j, error);
    if (status == CBSPATCH_OK) status = create_temp(&j, new_path, flags, error);
    if (status == CBSPATCH_OK) status = decode_and_apply(&j, error);
    if (status == CBSPATCH_OK) status = commit_temp(&j, new_path, flags, error);
    apply_job_close(&j);
    return status;
}

/* Checks the reader's arguments and opens the patch and the state: what
   cbspatch_apply_reader and cbspatch_apply_reader_writer share. */
static cbspatch_status open_reader_job(apply_job *j, cbspatch_read_fn read_old, void *context, int64_t old_size,
                                       const char *patch_path, int64_t expected_new_size, cbspatch_error *error) {
    if (read_old == NULL) return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "no old reader");
    if (old_size < 0) return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "old size %lld is negative", (long long)old_size);
    j->read_old = read_old;
    j->read_context = context;
    j->old_size = old_size;
    cbspatch_status status = open_patch(j, patch_path, expected_new_size, error);
    if (status == CBSPATCH_OK) status = alloc_state(j, error);
    return status;
}

cbspatch_status cbspatch_apply_reader(cbspatch_read_fn read_old, void *context, int64_t old_size,
                                      const char *patch_path, const char *new_path, int64_t expected_new_size,
                                      unsigned flags, cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    /* The path checks only look at old_path's emptiness: any non-empty name passes. */
    cbspatch_status status = check_arguments("(reader)", patch_path, new_path, flags, error);
    if (status != CBSPATCH_OK) return status;
    apply_job j;
    memset(&j, 0, sizeof j);
    j.patch_fd = j.old_fd = j.tmp_fd = -1;
    status = open_reader_job(&j, read_old, context, old_size, patch_path, expected_new_size, error);
    if (status == CBSPATCH_OK) status = create_temp(&j, new_path, flags, error);
    if (status == CBSPATCH_OK) status = decode_and_apply(&j, error);
    if (status == CBSPATCH_OK) status = commit_temp(&j, new_path, flags, error);
    apply_job_close(&j);
    return status;
}

cbspatch_status cbspatch_apply_reader_writer(cbspatch_read_fn read_old, void *read_context, int64_t old_size,
                                             const char *patch_path, cbspatch_write_fn write_new,
                                             void *write_context, int64_t expected_new_size,
                                             cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    if (patch_path == NULL || patch_path[0] == '\0')
        return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "patch path is empty");
    if (write_new == NULL) return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "no new writer");
    apply_job j;
    memset(&j, 0, sizeof j);
    j.patch_fd = j.old_fd = j.tmp_fd = -1;
    cbspatch_status status = open_reader_job(&j, read_old, read_context, old_size, patch_path, expected_new_size, error);
    if (status == CBSPATCH_OK) {
        j.s->out.write = write_new;
        j.s->out.context = write_context;
        status = decode_and_apply(&j, error);
    }
    apply_job_close(&j);
    return status;
}
