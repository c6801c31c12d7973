/*
 * libFuzzer target: cbz, CBspatch's own bzip2 decoder (a separate code path
 * from libbz2), fed one hostile bzip2 stream directly, in both of its block
 * layouts (small: 2.5 bytes a symbol; fast: 4), and compared with libbz2:
 * whatever cbz accepts, libbz2 must decode to the same bytes; whatever cbz
 * refuses after output, libbz2 must refuse too, after the same bytes (that is
 * what lets cbz's refusals without fall-back stand for libbz2's: an apply's
 * verdict can depend on how many bytes a stream gave before its error).
 * libbz2 runs in small mode, as CBspatch's fall-back does.
 *
 * It calls CBspatch's internal cbz_* functions (CBspatch/bsp_bzip2.h, hidden
 * from the library's users but linked in here with the target's sources).
 */
#include "../CBspatch/bsp_bzip2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Output beyond this is not decoded: bzip2 expands a few bytes into megabytes. */
#define OUT_CAP (4u << 20)

static uint8_t *out_cbz, *out_ref, *input;
static bz_arena arenas[2];
static cbz *decoders[2];
static int fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    out_cbz = malloc(OUT_CAP);
    out_ref = malloc(OUT_CAP);
    input = malloc(INPUT_CHUNK);
    char path[] = "/tmp/cbz-fuzz-XXXXXX";
    fd = mkstemp(path);
    if (out_cbz == NULL || out_ref == NULL || input == NULL || fd < 0) abort();
    unlink(path);
    cbz_init_tables();
    for (int fast = 0; fast < 2; fast++) {
        if (cbsp_arena_init(&arenas[fast], fast) != 0) abort();
        decoders[fast] = calloc(1, sizeof(cbz));
        if (decoders[fast] == NULL) abort();
    }
    return 0;
}

/* libbz2 (small mode, as bz_libbz2.c) on the whole input, output capped;
   returns DECODE_END/DECODE_MORE (cap hit)/DECODE_ERROR. */
static int reference(const uint8_t *data, size_t size, size_t *produced) {
    bz_stream bz;
    memset(&bz, 0, sizeof bz);
    if (BZ2_bzDecompressInit(&bz, 0, 1) != BZ_OK) abort();
    bz.next_in = (char *)data;
    bz.avail_in = (unsigned)size;
    bz.next_out = (char *)out_ref;
    bz.avail_out = OUT_CAP;
    int result;
    for (;;) {
        unsigned in_before = bz.avail_in, out_before = bz.avail_out;
        int ret = BZ2_bzDecompress(&bz);
        if (ret == BZ_STREAM_END) { result = DECODE_END; break; }
        if (ret != BZ_OK) { result = DECODE_ERROR; break; }
        if (bz.avail_out == 0) { result = DECODE_MORE; break; }
        if (bz.avail_in == 0 || (bz.avail_in == in_before && bz.avail_out == out_before)) {
            result = DECODE_ERROR; /* cut before the end-of-stream mark */
            break;
        }
    }
    *produced = OUT_CAP - bz.avail_out;
    BZ2_bzDecompressEnd(&bz);
    return result;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (1u << 20)) return 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    size_t ref_n = 0;
    int ref = reference(data, size, &ref_n);
    for (int fast = 0; fast < 2; fast++) {
        cbz *z = decoders[fast];
        memset(z, 0, sizeof *z);
        z->name = "fuzz";
        z->fd = fd;
        z->region_offset = 0;
        z->region_length = (int64_t)size;
        z->in = input;
        z->fast = fast;
        z->tt = (uint32_t *)(void *)arenas[fast].base;
        z->ll16 = (uint16_t *)(void *)arenas[fast].base;
        z->ll4 = arenas[fast].base + (size_t)CBZ_BLOCK_MAX * 2;
        cbz_begin_raw(z);
        size_t total = 0;
        int result = DECODE_MORE, before_output = 1;
        cbspatch_status status = CBSPATCH_OK;
        char message[MSG_SIZE];
        /* Small, odd output windows exercise the run and CRC bookkeeping across calls. */
        size_t window = 1 + (data[0] % 7) * 4093;
        while (result == DECODE_MORE && total < OUT_CAP) {
            size_t cap = OUT_CAP - total < window ? OUT_CAP - total : window, produced = 0;
            result = cbz_run(z, out_cbz + total, cap, &produced, &status, message, &before_output);
            if (produced > cap) __builtin_trap();
            total += produced;
        }
        if (result == DECODE_END) {
            /* Accepted: libbz2 must agree byte for byte. */
            if (ref != DECODE_END || ref_n != total || memcmp(out_cbz, out_ref, total) != 0) {
                fprintf(stderr, "cbz (fast=%d) accepted %zu bytes; libbz2 says %d with %zu bytes\n", fast, total, ref,
                        ref_n);
                __builtin_trap();
            }
        } else if (result == DECODE_ERROR) {
            if (status != CBSPATCH_ERR_BZIP2 || memchr(message, '\0', MSG_SIZE) == NULL) __builtin_trap();
            /* Refused after output (no fall-back possible): libbz2 must refuse as well. */
            if (!before_output && ref == DECODE_END) {
                fprintf(stderr, "cbz (fast=%d) refused after output: %s; libbz2 accepts\n", fast, message);
                __builtin_trap();
            }
            /* ...and libbz2 must have handed over the same bytes before its error. */
            if (!before_output && ref == DECODE_ERROR &&
                (ref_n != total || memcmp(out_cbz, out_ref, total) != 0)) {
                fprintf(stderr, "cbz (fast=%d) refused after %zu bytes: %s; libbz2 after %zu bytes\n", fast, total,
                        message, ref_n);
                __builtin_trap();
            }
        } else if (ref == DECODE_END && ref_n < total) {
            __builtin_trap(); /* cbz produced more than the whole stream */
        }
        /* Refused at a block start: what came before was CRC-checked block by
           block, so libbz2 must have produced the same bytes first. */
        if (result == DECODE_ERROR && before_output) {
            size_t n = total < ref_n ? total : ref_n;
            if (memcmp(out_cbz, out_ref, n) != 0) {
                fprintf(stderr, "cbz (fast=%d) output differs from libbz2 within the first %zu bytes\n", fast, n);
                __builtin_trap();
            }
        }
    }
    return 0;
}
