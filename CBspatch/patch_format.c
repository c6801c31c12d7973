/*
 * patch_format.c: the BSDIFF40 patch format: the 32-byte header and the
 * validation of control triples.
 *
 * The format is that of bsdiff 4.3 (Copyright 2003-2005 Colin Percival,
 * BSD-2-Clause; licence text in NOTICE): "BSDIFF40", three 8-byte
 * sign-magnitude little-endian integers (control stream length, diff stream
 * length, new size), then three bzip2 streams; the control stream is a list
 * of triples (x, y, z): add x diff bytes to x old bytes, copy y extra bytes,
 * move the old cursor by z. offtin is bsdiff 4.3's, rewritten.
 *
 * Changed from bsdiff 4.3's bspatch, which trusts the header and the triples
 * (CVE-2014-9862, CVE-2020-14315): every header field is checked (negative
 * and overflowing lengths, streams past the end of the file), and every
 * triple is checked before any byte is used (negative lengths, overflow,
 * writes past the new size, old reads before 0 or past the end of old), each
 * with its own status and message.
 */
#include "bsp_common.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cbspatch_status_name(cbspatch_status status) {
    switch (status) {
    case CBSPATCH_OK:
        return "ok";
    case CBSPATCH_ERR_IO:
        return "io";
    case CBSPATCH_ERR_MAGIC:
        return "magic";
    case CBSPATCH_ERR_HEADER:
        return "header";
    case CBSPATCH_ERR_SIZE_MISMATCH:
        return "size-mismatch";
    case CBSPATCH_ERR_BZIP2:
        return "bzip2";
    case CBSPATCH_ERR_CONTROL:
        return "control";
    case CBSPATCH_ERR_BOUNDS:
        return "bounds";
    case CBSPATCH_ERR_STALL:
        return "stall";
    case CBSPATCH_ERR_TRUNCATED:
        return "truncated";
    case CBSPATCH_ERR_NOMEM:
        return "nomem";
    case CBSPATCH_ERR_ARGUMENT:
        return "argument";
    case CBSPATCH_ERR_STOPPED:
        return "stopped";
    }
    return "unknown";
}

/* bsdiff's offtin: 8 bytes little-endian, top bit of the last byte is the sign.
   The magnitude is at most 2^63 - 1, so negating it cannot overflow. */
int64_t cbsp_offtin(const uint8_t *b) {
    uint64_t magnitude = 0;
    for (int i = 7; i >= 0; i--) magnitude = (magnitude << 8) | b[i];
    int negative = (magnitude >> 63) != 0;
    int64_t value = (int64_t)(magnitude & UINT64_C(0x7fffffffffffffff));
    return negative ? -value : value;
}

cbspatch_status cbsp_read_header_fd(int fd, const char *path, patch_header *h, cbspatch_error *error) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot stat patch %s: %s", path, strerror(errno));
    uint8_t header[HEADER_SIZE];
    ssize_t got = cbsp_pread_full(fd, header, sizeof header, 0);
    if (got < 0) return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot read patch %s: %s", path, strerror(errno));
    static const char magic[8] = {'B', 'S', 'D', 'I', 'F', 'F', '4', '0'};
    size_t magic_seen = (size_t)got < sizeof magic ? (size_t)got : sizeof magic;
    if (memcmp(header, magic, magic_seen) != 0) {
        char shown[9];
        for (size_t i = 0; i < 8; i++)
            shown[i] = (i < magic_seen && header[i] >= 0x20 && header[i] < 0x7f) ? (char)header[i] : '.';
        shown[magic_seen] = '\0';
        return cbsp_fail(error, CBSPATCH_ERR_MAGIC, "not a BSDIFF40 patch (starts with \"%s\")", shown);
    }
    if (got < HEADER_SIZE)
        return cbsp_fail(error, CBSPATCH_ERR_HEADER, "truncated header: patch is %zd bytes, the header alone is %d",
                         got, HEADER_SIZE);
    h->ctrl_len = cbsp_offtin(header + 8);
    h->diff_len = cbsp_offtin(header + 16);
    h->new_size = cbsp_offtin(header + 24);
    h->file_size = (int64_t)st.st_size;
    if (h->ctrl_len < 0)
        return cbsp_fail(error, CBSPATCH_ERR_HEADER, "ctrl length %lld is negative", (long long)h->ctrl_len);
    if (h->diff_len < 0)
        return cbsp_fail(error, CBSPATCH_ERR_HEADER, "diff length %lld is negative", (long long)h->diff_len);
    if (h->new_size < 0)
        return cbsp_fail(error, CBSPATCH_ERR_HEADER, "new size %lld is negative", (long long)h->new_size);
    int64_t end;
    if (__builtin_add_overflow((int64_t)HEADER_SIZE, h->ctrl_len, &end) ||
        __builtin_add_overflow(end, h->diff_len, &end))
        return cbsp_fail(error, CBSPATCH_ERR_HEADER, "ctrl length %lld + diff length %lld overflows",
                         (long long)h->ctrl_len, (long long)h->diff_len);
    if (end > h->file_size)
        return cbsp_fail(error, CBSPATCH_ERR_HEADER,
                         "ctrl length %lld + diff length %lld run past the end of the %lld-byte patch",
                         (long long)h->ctrl_len, (long long)h->diff_len, (long long)h->file_size);
    return CBSPATCH_OK;
}

cbspatch_status cbspatch_read_header(const char *patch_path, int64_t *ctrl_len, int64_t *diff_len, int64_t *new_size,
                                     cbspatch_error *error) {
    if (error != NULL) error->message[0] = '\0';
    if (patch_path == NULL || patch_path[0] == '\0')
        return cbsp_fail(error, CBSPATCH_ERR_ARGUMENT, "patch path is empty");
    int fd = cbsp_open_retry(patch_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cbsp_fail(error, CBSPATCH_ERR_IO, "cannot open patch %s: %s", patch_path, strerror(errno));
    patch_header h;
    cbspatch_status status = cbsp_read_header_fd(fd, patch_path, &h, error);
    close(fd);
    if (status != CBSPATCH_OK) return status;
    if (ctrl_len != NULL) *ctrl_len = h.ctrl_len;
    if (diff_len != NULL) *diff_len = h.diff_len;
    if (new_size != NULL) *new_size = h.new_size;
    return CBSPATCH_OK;
}

triple_verdict cbsp_triple_check(int64_t newpos, int64_t oldpos, int64_t x, int64_t y, int64_t z, int64_t new_size,
                                 int64_t old_size, int64_t *next_new, int64_t *next_old) {
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

cbspatch_status cbsp_triple_refusal(triple_verdict verdict, uint64_t index, int64_t newpos, int64_t oldpos,
                                    const int64_t triple[3], int64_t new_size, int64_t old_size,
                                    cbspatch_error *error) {
    int64_t x = triple[0], y = triple[1], z = triple[2];
    unsigned long long k = (unsigned long long)index;
    switch (verdict) {
    case TRIPLE_OK:
        break;
    case TRIPLE_NEGATIVE_X:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: diff length x=%lld is negative", k,
                         (long long)x);
    case TRIPLE_NEGATIVE_Y:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: extra length y=%lld is negative", k,
                         (long long)y);
    case TRIPLE_X_OVERFLOW:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: x=%lld overflows new position %lld", k,
                         (long long)x, (long long)newpos);
    case TRIPLE_X_PAST_NEW:
        return cbsp_fail(error, CBSPATCH_ERR_BOUNDS,
                         "control triple %llu: diff of %lld bytes at new position %lld would write past new size %lld",
                         k, (long long)x, (long long)newpos, (long long)new_size);
    case TRIPLE_Y_OVERFLOW:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: y=%lld overflows new position %lld", k,
                         (long long)y, (long long)(newpos + x));
    case TRIPLE_Y_PAST_NEW:
        return cbsp_fail(error, CBSPATCH_ERR_BOUNDS,
                         "control triple %llu: extra of %lld bytes at new position %lld would write past new size %lld",
                         k, (long long)y, (long long)(newpos + x), (long long)new_size);
    case TRIPLE_OLD_BEFORE_START:
        return cbsp_fail(error, CBSPATCH_ERR_BOUNDS, "control triple %llu: old read at %lld before start", k,
                         (long long)oldpos);
    case TRIPLE_OLD_OVERFLOW:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: x=%lld overflows old position %lld", k,
                         (long long)x, (long long)oldpos);
    case TRIPLE_OLD_PAST_END:
        return cbsp_fail(error, CBSPATCH_ERR_BOUNDS,
                         "control triple %llu: old read of %lld bytes at %lld past end of old (%lld bytes)", k,
                         (long long)x, (long long)oldpos, (long long)old_size);
    case TRIPLE_Z_OVERFLOW:
        return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: seek z=%lld overflows old position %lld", k,
                         (long long)z, (long long)(x > 0 ? oldpos + x : oldpos));
    }
    return cbsp_fail(error, CBSPATCH_ERR_CONTROL, "control triple %llu: refused", k);
}
