/*
 * libFuzzer target: cbspatch_apply on a hostile patch (header, control triples,
 * the three bzip2 streams) against a small fixed old file.
 *
 * Every input is applied twice: as shipped (cbz, the fast decoder, with the
 * extra stream split between two workers) and with cbz declining every
 * stream's first block, so libbz2 decodes everything. The two must agree on
 * the status and, on success, on every byte: cbz may only change the speed.
 *
 * The old file is $CBSPATCH_FUZZ_OLD (scripts/fuzz.sh points it at
 * fixtures/fuzz/bspatch-old.bin, the file the seed patches were made from).
 */
#include "cbspatch.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Header new sizes above this are only header-checked: the output must stay
   bounded so that every run is fast (bzip2 expands a few bytes into megabytes). */
#define MAX_NEW_SIZE (1 << 20)

static char dir[64], old_path[128], patch_path[128], new_path[128];
static uint8_t *new_bytes[2];

static void die(const char *what) {
    perror(what);
    exit(2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/cbspatch-fuzz-XXXXXX", base);
    if (mkdtemp(dir) == NULL) die("mkdtemp");
    snprintf(old_path, sizeof old_path, "%s/old", dir);
    snprintf(patch_path, sizeof patch_path, "%s/patch", dir);
    snprintf(new_path, sizeof new_path, "%s/new", dir);
    const char *source = getenv("CBSPATCH_FUZZ_OLD");
    if (source == NULL) source = "fixtures/fuzz/bspatch-old.bin";
    FILE *in = fopen(source, "rb");
    if (in == NULL) die(source);
    static uint8_t old[1 << 16];
    size_t n = fread(old, 1, sizeof old, in);
    fclose(in);
    FILE *out = fopen(old_path, "wb");
    if (out == NULL || fwrite(old, 1, n, out) != n || fclose(out) != 0) die(old_path);
    for (int i = 0; i < 2; i++)
        if ((new_bytes[i] = malloc(MAX_NEW_SIZE)) == NULL) die("malloc");
    return 0;
}

static void write_patch(const uint8_t *data, size_t size) {
    int fd = open(patch_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die(patch_path);
    size_t done = 0;
    while (done < size) {
        ssize_t r = write(fd, data + done, size - done);
        if (r <= 0) die("write");
        done += (size_t)r;
    }
    close(fd);
}

/* Reads the result (if any) and removes it; returns its size, or -1 if absent. */
static long take_new(uint8_t *buffer) {
    int fd = open(new_path, O_RDONLY);
    if (fd < 0) return -1;
    long total = 0;
    for (;;) {
        ssize_t r = read(fd, buffer + total, (size_t)(MAX_NEW_SIZE - total));
        if (r < 0) die("read");
        if (r == 0) break;
        total += r;
        if (total == MAX_NEW_SIZE) break;
    }
    close(fd);
    unlink(new_path);
    return total;
}

static cbspatch_status apply(int via_libbz2, long *new_size, uint8_t *buffer) {
    cbspatch_testing_faults(via_libbz2 ? 1 : 0, 0);
    cbspatch_error error;
    memset(&error, 0x55, sizeof error); /* must be overwritten with a NUL-terminated line */
    cbspatch_status status = cbspatch_apply_flags(old_path, patch_path, new_path, -1, CBSPATCH_NO_SYNC, &error);
    cbspatch_testing_faults(0, 0);
    if (memchr(error.message, '\0', sizeof error.message) == NULL) __builtin_trap();
    if (status == CBSPATCH_OK && error.message[0] != '\0') __builtin_trap();
    if (status != CBSPATCH_OK && error.message[0] == '\0') __builtin_trap();
    if (strcmp(cbspatch_status_name(status), "unknown") == 0) __builtin_trap();
    *new_size = take_new(buffer);
    /* Success leaves exactly the new file; failure leaves none. */
    if ((status == CBSPATCH_OK) != (*new_size >= 0)) __builtin_trap();
    return status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_patch(data, size);
    int64_t ctrl_len = 0, diff_len = 0, header_new_size = 0;
    cbspatch_status header = cbspatch_read_header(patch_path, &ctrl_len, &diff_len, &header_new_size, NULL);
    if (header != CBSPATCH_OK || header_new_size > MAX_NEW_SIZE) {
        /* The apply must refuse it for the same reason, without decoding anything. */
        if (header != CBSPATCH_OK) {
            long ignored;
            if (apply(0, &ignored, new_bytes[0]) != header) __builtin_trap();
        }
        return 0;
    }
    long sizes[2];
    cbspatch_status fast = apply(0, &sizes[0], new_bytes[0]);
    cbspatch_status slow = apply(1, &sizes[1], new_bytes[1]);
    if (fast != slow) {
        fprintf(stderr, "verdicts differ: fast decoder %s, libbz2 %s\n", cbspatch_status_name(fast),
                cbspatch_status_name(slow));
        __builtin_trap();
    }
    if (fast == CBSPATCH_OK) {
        if (sizes[0] != header_new_size || sizes[1] != header_new_size) __builtin_trap();
        if (memcmp(new_bytes[0], new_bytes[1], (size_t)sizes[0]) != 0) __builtin_trap();
    }
    return 0;
}
