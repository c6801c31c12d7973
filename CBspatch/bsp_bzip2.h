/*
 * bsp_bzip2.h: the two bzip2 decoders of CBspatch, internal to the target.
 *
 *   bz_libbz2.c  libbz2 (Julian Seward's bzip2, bzip2 licence, see NOTICE) fed
 *                straight from the patch file, with its memory from a
 *                per-worker arena: the reference, and the fall-back whenever
 *                cbz declines a block;
 *   bz_fast.c    cbz, a bzip2 decoder of our own for the hot path, after
 *                libbz2's block layout (see there).
 * Both decode a region of the patch file (one of its three streams) into a
 * caller's buffer: DECODE_MORE when the buffer is full, DECODE_END at the end
 * of the stream, DECODE_ERROR with a status and a one-line message.
 */
#ifndef BSP_BZIP2_H
#define BSP_BZIP2_H

#include "bsp_common.h"

#include <bzlib.h>

#pragma GCC visibility push(hidden)

/* Decoder memory: one arena per worker, allocated once per apply. It holds  */
/* cbz's block array, or, if the stream falls back, everything libbz2       */
/* allocates (served by arena_alloc), so no decoder mallocs while running.  */

typedef struct {
    uint8_t *base;
    size_t size, used;
    unsigned live;
} bz_arena;

/* Symbols in the largest bzip2 block (level 9). */
#define CBZ_BLOCK_MAX 900000

int cbsp_arena_init(bz_arena *a, int fast);
void cbsp_arena_destroy(bz_arena *a);

/* libbz2, fed straight from the patch file: the reference decoder, used    */
/* when cbz (below) declines a stream.                                      */

#define BLOCK_MAGIC UINT64_C(0x314159265359)
#define EOS_MAGIC UINT64_C(0x177245385090)

enum { DECODE_MORE = 1, DECODE_END = 0, DECODE_ERROR = -1 };

typedef struct {
    const char *name;
    int fd;
    int64_t region_offset, region_length; /* the stream's bytes in the patch */
    bz_stream bz;
    int ready;
    bz_arena *arena;
    uint8_t *input; /* INPUT_CHUNK */
    int64_t next_offset, input_left;
} decoder;

/* Reads n <= 56 bits at bit position `bit` of the stream region; 0 or -1. */
int cbsp_region_bits(int fd, int64_t region_offset, int64_t region_length, int64_t bit, int n, uint64_t *value);
/* Starts libbz2 (small mode, memory from d->arena) at the start of the region. */
int cbsp_decoder_begin(decoder *d, cbspatch_status *status, char *message);
void cbsp_decoder_end(decoder *d);
/* Decodes into out[0..capacity): DECODE_MORE when out is full, DECODE_END at
   the end of the stream, DECODE_ERROR with status/message set. */
int cbsp_decoder_run(decoder *d, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status,
                     char *message);

/* ------------------------------------------------------------------------ */
/* cbz (bz_fast.c)                                                          */

#define CBZ_MAX_GROUPS 6
#define CBZ_MAX_ALPHA 258
#define CBZ_MAX_CODE_LEN 23 /* array bound, as in libbz2; lengths are 1..20 */
#define CBZ_MAX_SELECTORS 18002
#define CBZ_GROUP_SIZE 50
#define CBZ_LUT_BITS 10 /* Huffman codes up to this long decode with one lookup */

enum { CBZ_HEADER, CBZ_MARK, CBZ_OUTPUT, CBZ_DONE };

typedef struct {
    const char *name;
    int fd;
    int64_t region_offset, region_length;
    /* bit reader */
    uint8_t *in;
    size_t in_len, in_pos;
    int64_t in_next; /* next region byte to load */
    uint64_t bits;
    int nbits;
    int64_t bitpos; /* region bit of the next unread bit */
    /* stream */
    int state, level, piece;
    int64_t piece_end, align_to;
    uint32_t combined, piece_crc;
    /* block */
    /* The block's inverse-BWT links, 20 bits each: low 16 in ll16, high 4 in
       ll4 (libbz2's "small" layout, 2.5 bytes a symbol instead of 4: four
       decoders run at once, and the walk is bound by cache misses anyway).
       During parsing ll16 holds the symbols. */
    uint16_t *ll16; /* CBZ_BLOCK_MAX entries */
    uint8_t *ll4;   /* CBZ_BLOCK_MAX / 2 */
    /* Or, when `fast`, libbz2's fast layout: tt[i] = symbol | next index << 8,
       4 bytes a symbol but built and walked without the dependent cycle
       reversal; for the extra stream, whose blocks are full and decide the
       time when the package is deflated. */
    uint32_t *tt;
    int fast;
    uint8_t bucket[CBZ_BLOCK_MAX / 1024 + 1]; /* symbol at position 1024*i: starts the cftab search */
    uint32_t nblock, tpos, used, stored_crc, crc, pending;
    int last, run;
    int overrun; /* the run after a block that ends in four equal bytes was set up */
    uint8_t pending_ch;
    /* tables */
    uint8_t seq_to_unseq[256];
    uint8_t selector[CBZ_MAX_SELECTORS];
    uint8_t len[CBZ_MAX_GROUPS][CBZ_MAX_ALPHA];
    int32_t limit[CBZ_MAX_GROUPS][CBZ_MAX_CODE_LEN], base[CBZ_MAX_GROUPS][CBZ_MAX_CODE_LEN];
    int32_t perm[CBZ_MAX_GROUPS][CBZ_MAX_ALPHA];
    int32_t minlen[CBZ_MAX_GROUPS];
    /* lut[g][next CBZ_LUT_BITS bits] = code length << 9 | symbol, or 0 for
       "decode the slow way" (longer codes, and anything odd). */
    uint16_t lut[CBZ_MAX_GROUPS][1 << CBZ_LUT_BITS];
    uint32_t unzftab[256], cftab[257];
    int test_blocks;
} cbz;

/* Outcome of the block parser besides success. */
enum { CBZ_OK = 0, CBZ_CORRUPT = -1, CBZ_SHORT = -2, CBZ_IO = -3, CBZ_UNSUPPORTED = -4 };

/* Builds the CRC tables once per process; call before the first cbz_run. */
void cbz_init_tables(void);
/* Decodes the whole region as one bzip2 stream. */
void cbz_begin_raw(cbz *z);
/* Decodes exactly one block: its mark at start_bit, the next mark at end_bit. */
void cbz_begin_piece(cbz *z, int64_t start_bit, int64_t end_bit, uint32_t crc, int level);
/* Decodes into out[0..capacity); DECODE_MORE / DECODE_END / DECODE_ERROR.
   On error *before_output says whether the failing block had produced nothing
   (then libbz2 can take over the stream without anything being used twice). */
int cbz_run(cbz *z, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status, char *message,
            int *before_output);

#pragma GCC visibility pop

#endif /* BSP_BZIP2_H */
