/*
 * support.c: what every part of CBspatch leans on: the one error helper (a
 * status plus a one-line message, never an exit), I/O that retries on EINTR
 * and short transfers, page touching, and the test hooks.
 *
 * Our own code, under the project's licence (MIT, see LICENSE). bsdiff 4.3's
 * bspatch, whose format CBspatch applies, ends the process (the BSD error-and-exit call) on
 * any failure and ignores short reads; these helpers are what replaces that.
 */
#include "bsp_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

cbspatch_status cbsp_fail(cbspatch_error *error, cbspatch_status status, const char *format, ...) {
    if (error != NULL) {
        va_list args;
        va_start(args, format);
        vsnprintf(error->message, sizeof error->message, format, args);
        va_end(args);
    }
    return status;
}

/* Test hooks (cbspatch_testing_faults); both 0 in normal use. */
int cbsp_testing_decline_block;
int cbsp_testing_fake_split;

void cbspatch_testing_faults(int decline_block, int fake_split) {
    __atomic_store_n(&cbsp_testing_decline_block, decline_block, __ATOMIC_RELAXED);
    __atomic_store_n(&cbsp_testing_fake_split, fake_split, __ATOMIC_RELAXED);
}

/* pread until `length` bytes or end of file; returns bytes read or -1 (errno set). */
ssize_t cbsp_pread_full(int fd, void *buffer, size_t length, int64_t offset) {
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

ssize_t cbsp_old_read(const cbsp_old_source *source, void *buffer, size_t length, int64_t offset) {
    if (source->read_old == NULL) return cbsp_pread_full(source->fd, buffer, length, offset);
    /* The callback may return less than asked; each pass makes progress or ends,
       so the loop runs at most `length` times. */
    size_t done = 0;
    while (done < length) {
        int64_t r = source->read_old(source->context, (char *)buffer + done, length - done, offset + (int64_t)done);
        if (r < 0) return -1;
        if ((uint64_t)r > length - done) { /* more than asked: the callback wrote past buffer's end */
            errno = EOVERFLOW;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

int cbsp_write_full(int fd, const void *buffer, size_t length) {
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

int cbsp_open_retry(const char *path, int flags) {
    int fd;
    do fd = open(path, flags);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* Writes one byte per page, through volatile so it cannot be optimised away. */
void cbsp_touch_pages(uint8_t *p, size_t size) {
    volatile uint8_t *v = p;
    for (size_t i = 0; i < size; i += 4096) v[i] = 0;
    if (size > 0) v[size - 1] = 0;
}
