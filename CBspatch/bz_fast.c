/*
 * bz_fast.c: cbz, a bzip2 decoder of our own for the hot path of an apply.
 *
 * Why: libbz2 updates its CRC one output byte at a time inside the run
 * expansion loop, which makes the long zero runs of a diff stream cost ~6
 * cycles per byte, most of the apply time for stored packages. cbz writes
 * runs with memset and checks the CRC afterwards with a slicing-by-8 table
 * (and a zero-run table: four lookups for a 251-byte zero run), and it can
 * start at any bit, so it decodes the blocks of a split stream directly.
 *
 * Design: the bzip2 format and libbz2's decoder (bzip2 1.0.x, Copyright
 * 1996-2019 Julian R Seward, bzip2 licence, a BSD-style licence; see NOTICE).
 * The block parser follows libbz2's decompress.c step for step (symbol map,
 * selectors, delta-coded code lengths, canonical Huffman tables built exactly
 * as its BZ2_hbCreateDecodeTables does, RUNA/RUNB, move-to-front), and the
 * inverse BWT uses libbz2's two block layouts: the "fast" one (tt[], 4 bytes
 * a symbol) and the "small" one (ll16 + ll4, 2.5 bytes a symbol, with the
 * cftab search for a symbol). No libbz2 source is copied; this is a
 * reimplementation of its layout, under the project's licence.
 *
 * Changed from libbz2, beyond speed: cbz never aborts (libbz2 calls
 * bz_internal_error); every table index and run length is bounded; and it
 * refuses (CBZ_UNSUPPORTED) anything unusual, randomised blocks included,
 * before any output of the block at hand, so that libbz2 can take over the
 * stream (see stream_fall_back in stream.c). fuzz/fuzz_cbz.c checks it
 * against libbz2 byte for byte.
 */
#include "bsp_bzip2.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static uint32_t crc_tables[8][256];
/* crc_zero_run[j][v]: the CRC register (v << 8j) after 251 zero bytes. bzip2
   stores runs as four bytes and a count of up to 251 more, so the zero
   stretches of a diff stream expand mostly into 251-byte runs; the CRC is
   linear, so four lookups replace 251 byte steps. */
static uint32_t crc_zero_run[4][256];
static pthread_once_t crc_tables_once = PTHREAD_ONCE_INIT;
#define CRC_ZERO_RUN 251

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        uint32_t b = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
        crc = crc_tables[7][a >> 24] ^ crc_tables[6][(a >> 16) & 0xff] ^ crc_tables[5][(a >> 8) & 0xff] ^
              crc_tables[4][a & 0xff] ^ crc_tables[3][b >> 24] ^ crc_tables[2][(b >> 16) & 0xff] ^
              crc_tables[1][(b >> 8) & 0xff] ^ crc_tables[0][b & 0xff];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) crc = (crc << 8) ^ crc_tables[0][(crc >> 24) ^ *p++];
    return crc;
}

/* bzip2's CRC: CRC-32, polynomial 0x04c11db7, most significant bit first. */
static void crc_tables_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i << 24;
        for (int k = 0; k < 8; k++) c = (c & 0x80000000u) ? (c << 1) ^ 0x04c11db7u : c << 1;
        crc_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_tables[t][i] = (crc_tables[t - 1][i] << 8) ^ crc_tables[0][crc_tables[t - 1][i] >> 24];
    /* Linear: run the 32 single-bit registers through the zeros, then
       combine their images for every byte value. */
    static const uint8_t zeros[CRC_ZERO_RUN];
    uint32_t image[32];
    for (int b = 0; b < 32; b++) image[b] = crc_update(UINT32_C(1) << b, zeros, CRC_ZERO_RUN);
    for (int j = 0; j < 4; j++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t c = 0;
            for (int k = 0; k < 8; k++)
                if (v & (1u << k)) c ^= image[8 * j + k];
            crc_zero_run[j][v] = c;
        }
}

static inline uint32_t crc_after_zero_run(uint32_t crc) {
    return crc_zero_run[0][crc & 0xff] ^ crc_zero_run[1][(crc >> 8) & 0xff] ^ crc_zero_run[2][(crc >> 16) & 0xff] ^
           crc_zero_run[3][crc >> 24];
}

void cbz_init_tables(void) {
    pthread_once(&crc_tables_once, crc_tables_build);
}

static int cbz_need(cbz *z, int n) {
    while (z->nbits < n) {
        if (z->in_pos == z->in_len) {
            if (z->in_next >= z->region_length) return CBZ_SHORT;
            int64_t left = z->region_length - z->in_next;
            size_t want = left < INPUT_CHUNK ? (size_t)left : (size_t)INPUT_CHUNK;
            ssize_t got = cbsp_pread_full(z->fd, z->in, want, z->region_offset + z->in_next);
            if (got <= 0) return CBZ_IO;
            z->in_next += got;
            z->in_len = (size_t)got;
            z->in_pos = 0;
        }
        z->bits = (z->bits << 8) | z->in[z->in_pos++];
        z->nbits += 8;
    }
    return CBZ_OK;
}

static inline uint32_t cbz_take(cbz *z, int n) {
    uint32_t v = (uint32_t)((z->bits >> (z->nbits - n)) & ((UINT64_C(1) << n) - 1));
    z->nbits -= n;
    z->bitpos += n;
    return v;
}

#define CBZ_GET(var, n)                    \
    do {                                   \
        int need_ = cbz_need(z, (n));      \
        if (need_ != CBZ_OK) return need_; \
        (var) = cbz_take(z, (n));          \
    } while (0)

static void cbz_seek(cbz *z, int64_t bit) {
    z->align_to = 0;
    z->in_next = bit / 8;
    z->in_len = z->in_pos = 0;
    z->bits = 0;
    z->nbits = 0;
    z->bitpos = (bit / 8) * 8;
}

static inline uint32_t cbz_link(const cbz *z, uint32_t i) {
    return (uint32_t)z->ll16[i] | ((uint32_t)((z->ll4[i >> 1] >> ((i << 2) & 4)) & 0xf) << 16);
}

static inline void cbz_set_link(cbz *z, uint32_t i, uint32_t v) {
    z->ll16[i] = (uint16_t)v;
    uint8_t *b = &z->ll4[i >> 1];
    *b = (i & 1) ? (uint8_t)((*b & 0x0f) | ((v >> 16) << 4)) : (uint8_t)((*b & 0xf0) | (v >> 16));
}

/* Parses one block after its 48-bit mark: tables, symbols, inverse BWT links. */

/* The symbol map: which of the 256 byte values the block uses. */
static int cbz_read_symbol_map(cbz *z, int *n_in_use_out) {
    uint32_t in_use16;
    CBZ_GET(in_use16, 16);
    int n_in_use = 0;
    for (int i = 0; i < 16; i++) {
        if (!(in_use16 & (0x8000u >> i))) continue;
        uint32_t in_use;
        CBZ_GET(in_use, 16);
        for (int j = 0; j < 16; j++)
            if (in_use & (0x8000u >> j)) z->seq_to_unseq[n_in_use++] = (uint8_t)(i * 16 + j);
    }
    if (n_in_use == 0) return CBZ_CORRUPT;
    *n_in_use_out = n_in_use;
    return CBZ_OK;
}

/* The number of Huffman tables and, for every 50 symbols, which one codes
   them (move-to-front coded). */
static int cbz_read_selectors(cbz *z, uint32_t *n_groups_out, uint32_t *n_selectors_out) {
    uint32_t v;
    uint32_t n_groups, n_selectors;
    CBZ_GET(n_groups, 3);
    if (n_groups < 2 || n_groups > CBZ_MAX_GROUPS) return CBZ_CORRUPT;
    CBZ_GET(n_selectors, 15);
    if (n_selectors < 1) return CBZ_CORRUPT;
    uint8_t pos[CBZ_MAX_GROUPS];
    for (uint32_t g = 0; g < n_groups; g++) pos[g] = (uint8_t)g;
    for (uint32_t i = 0; i < n_selectors; i++) {
        uint32_t j = 0;
        for (;;) {
            CBZ_GET(v, 1);
            if (v == 0) break;
            if (++j >= n_groups) return CBZ_CORRUPT;
        }
        if (i < CBZ_MAX_SELECTORS) { /* libbz2 reads them all, keeps 18002 */
            uint8_t t = pos[j];
            for (; j > 0; j--) pos[j] = pos[j - 1];
            pos[0] = t;
            z->selector[i] = t;
        }
    }
    if (n_selectors > CBZ_MAX_SELECTORS) n_selectors = CBZ_MAX_SELECTORS;
    *n_groups_out = n_groups;
    *n_selectors_out = n_selectors;
    return CBZ_OK;
}

/* Canonical decoding tables for group g, built exactly as libbz2 does, and
   the lookup table that decodes short codes in one step. */
static void cbz_build_tables(cbz *z, uint32_t g, int alpha) {
    int min_len = 32, max_len = 0;
    for (int i = 0; i < alpha; i++) {
        if (z->len[g][i] > max_len) max_len = z->len[g][i];
        if (z->len[g][i] < min_len) min_len = z->len[g][i];
    }
    int32_t *perm = z->perm[g], *base = z->base[g], *limit = z->limit[g];
    memset(perm, 0, sizeof z->perm[g]);
    int pp = 0;
    for (int l = min_len; l <= max_len; l++)
        for (int s = 0; s < alpha; s++)
            if (z->len[g][s] == l) perm[pp++] = s;
    for (int i = 0; i < CBZ_MAX_CODE_LEN; i++) base[i] = limit[i] = 0;
    for (int i = 0; i < alpha; i++) base[z->len[g][i] + 1]++;
    for (int i = 1; i < CBZ_MAX_CODE_LEN; i++) base[i] += base[i - 1];
    int32_t vec = 0;
    for (int l = min_len; l <= max_len; l++) {
        vec += base[l + 1] - base[l];
        limit[l] = vec - 1;
        vec <<= 1;
    }
    for (int l = min_len + 1; l <= max_len; l++) base[l] = ((limit[l - 1] + 1) << 1) - base[l];
    z->minlen[g] = min_len;
    /* The lookup table replays the slow decoder's steps for every
       CBZ_LUT_BITS-bit prefix, so both always agree. */
    for (uint32_t bits = 0; bits < (1u << CBZ_LUT_BITS); bits++) {
        uint16_t entry = 0;
        for (int l = min_len; l <= CBZ_LUT_BITS; l++) {
            int32_t zvec = (int32_t)(bits >> (CBZ_LUT_BITS - l));
            if (zvec > limit[l]) continue;
            int32_t at = zvec - base[l];
            if (at >= 0 && at < CBZ_MAX_ALPHA && perm[at] < alpha) entry = (uint16_t)(l << 9 | perm[at]);
            break;
        }
        z->lut[g][bits] = entry;
    }
}

/* The code lengths of group g (delta coded), then its tables. */
static int cbz_read_group(cbz *z, uint32_t g, int alpha) {
    uint32_t v;
    uint32_t curr;
    CBZ_GET(curr, 5);
    for (int i = 0; i < alpha; i++) {
        for (;;) {
            if (curr < 1 || curr > 20) return CBZ_CORRUPT;
            CBZ_GET(v, 1);
            if (v == 0) break;
            CBZ_GET(v, 1);
            if (v == 0)
                curr++;
            else
                curr--;
        }
        z->len[g][i] = (uint8_t)curr;
    }
    cbz_build_tables(z, g, alpha);
    return CBZ_OK;
}

/* Symbols: Huffman, then run lengths of the front symbol, then move-to-front,
   into the block array; *nblock_out is the block's length. The hot loop of
   block parsing: kept whole so the compiler keeps its state in registers. */
static int cbz_read_symbols(cbz *z, int n_in_use, uint32_t n_selectors, uint32_t *nblock_out) {
    uint32_t v;
    int alpha = n_in_use + 2;
    uint8_t mtf[256];
    for (int i = 0; i < 256; i++) mtf[i] = (uint8_t)i;
    memset(z->unzftab, 0, sizeof z->unzftab);
    uint32_t nblock = 0, block_max = (uint32_t)z->level * 100000u;
    int eob = n_in_use + 1;
    int32_t group_no = -1, group_pos = 0;
    const int32_t *g_limit = NULL, *g_base = NULL, *g_perm = NULL;
    const uint16_t *g_lut = NULL;
    int32_t g_minlen = 0;
    uint32_t run = 0, run_weight = 1;
    int in_run = 0;
    for (;;) {
        if (group_pos == 0) {
            if (++group_no >= (int32_t)n_selectors) return CBZ_CORRUPT;
            group_pos = CBZ_GROUP_SIZE;
            int sel = z->selector[group_no];
            g_limit = z->limit[sel];
            g_base = z->base[sel];
            g_perm = z->perm[sel];
            g_minlen = z->minlen[sel];
            g_lut = z->lut[sel];
        }
        group_pos--;
        int sym = -1;
        if (z->nbits >= CBZ_LUT_BITS || cbz_need(z, CBZ_LUT_BITS) == CBZ_OK) {
            uint16_t entry = g_lut[(z->bits >> (z->nbits - CBZ_LUT_BITS)) & ((1u << CBZ_LUT_BITS) - 1)];
            if (entry != 0) {
                (void)cbz_take(z, entry >> 9);
                sym = entry & 0x1ff;
            }
        }
        if (sym < 0) { /* long code, end of input near, or corrupt: bit by bit, as libbz2 */
            int zn = g_minlen;
            uint32_t zvec;
            CBZ_GET(zvec, zn);
            for (;;) {
                if (zn > 20) return CBZ_CORRUPT;
                if ((int32_t)zvec <= g_limit[zn]) break;
                zn++;
                CBZ_GET(v, 1);
                zvec = (zvec << 1) | v;
            }
            int32_t at = (int32_t)zvec - g_base[zn];
            if (at < 0 || at >= CBZ_MAX_ALPHA) return CBZ_CORRUPT;
            sym = g_perm[at];
            if (sym >= alpha) return CBZ_CORRUPT;
        }

        if (sym <= 1) { /* RUNA / RUNB: bijective base-2 run length */
            if (!in_run) {
                in_run = 1;
                run = 0;
                run_weight = 1;
            }
            if (run_weight >= 2u * 1024 * 1024) return CBZ_CORRUPT;
            run += (uint32_t)(sym + 1) * run_weight;
            run_weight <<= 1;
            continue;
        }
        if (in_run) {
            in_run = 0;
            uint8_t uc = z->seq_to_unseq[mtf[0]];
            if (run > block_max - nblock) return CBZ_CORRUPT;
            z->unzftab[uc] += run;
            if (z->fast)
                for (uint32_t k = 0; k < run; k++) z->tt[nblock + k] = uc;
            else
                for (uint32_t k = 0; k < run; k++) z->ll16[nblock + k] = uc;
            nblock += run;
        }
        if (sym == eob) break;
        if (nblock >= block_max) return CBZ_CORRUPT;
        int nn = sym - 1; /* 1 .. n_in_use - 1 */
        uint8_t m = mtf[nn];
        memmove(mtf + 1, mtf, (size_t)nn);
        mtf[0] = m;
        uint8_t uc = z->seq_to_unseq[m];
        z->unzftab[uc]++;
        if (z->fast)
            z->tt[nblock++] = uc;
        else
            z->ll16[nblock++] = uc;
    }
    *nblock_out = nblock;
    return CBZ_OK;
}

/* Links every position of the block to the next one in output order. */
static void cbz_inverse_bwt(cbz *z, uint32_t nblock, uint32_t orig) {
    z->cftab[0] = 0;
    for (int i = 1; i <= 256; i++) z->cftab[i] = z->cftab[i - 1] + z->unzftab[i - 1];
    uint32_t next[256];
    memcpy(next, z->cftab, sizeof next);
    z->nblock = nblock;
    if (z->fast) {
        /* Inverse BWT, libbz2's fast mode: every position gets the index of
           the one that follows it in output order, above its own symbol. */
        for (uint32_t i = 0; i < nblock; i++) z->tt[next[z->tt[i] & 0xff]++] |= i << 8;
        z->tpos = z->tt[orig] >> 8;
    } else {
        /* Inverse BWT, libbz2's small mode: links first map each position to
           its symbol's place in sorted order, then the cycle through orig is
           reversed so that following links from orig yields the output order. */
        for (uint32_t i = 0; i < nblock; i++) cbz_set_link(z, i, next[(uint8_t)z->ll16[i]]++);
        uint32_t i = orig, j = cbz_link(z, orig);
        do { /* a permutation: back at orig within nblock steps */
            uint32_t after = cbz_link(z, j);
            cbz_set_link(z, j, i);
            i = j;
            j = after;
        } while (i != orig);
        uint32_t sym = 0;
        for (uint32_t b = 0; b * 1024u < nblock; b++) {
            while (z->cftab[sym + 1] <= b * 1024u) sym++; /* cftab[256] = nblock ends it */
            z->bucket[b] = (uint8_t)sym;
        }
        z->tpos = orig;
    }
}

/* Parses one block after its 48-bit mark: tables, symbols, inverse BWT links. */
static int cbz_block(cbz *z) {
    uint32_t v;
    CBZ_GET(z->stored_crc, 32);
    CBZ_GET(v, 1);
    if (v != 0) return CBZ_UNSUPPORTED; /* randomised blocks: obsolete, left to libbz2 */
    uint32_t orig;
    CBZ_GET(orig, 24);

    int n_in_use = 0;
    int r = cbz_read_symbol_map(z, &n_in_use);
    if (r != CBZ_OK) return r;
    int alpha = n_in_use + 2;
    uint32_t n_groups = 0, n_selectors = 0;
    r = cbz_read_selectors(z, &n_groups, &n_selectors);
    if (r != CBZ_OK) return r;
    for (uint32_t g = 0; g < n_groups; g++) {
        r = cbz_read_group(z, g, alpha);
        if (r != CBZ_OK) return r;
    }
    uint32_t nblock = 0;
    r = cbz_read_symbols(z, n_in_use, n_selectors, &nblock);
    if (r != CBZ_OK) return r;
    if (orig >= nblock) return CBZ_CORRUPT;
    cbz_inverse_bwt(z, nblock, orig);
    z->used = 0;
    z->crc = 0xffffffffu;
    z->pending = 0;
    z->last = -1;
    z->run = 0;
    z->overrun = 0;
    return CBZ_OK;
}

void cbz_begin_raw(cbz *z) {
    cbz_seek(z, 0);
    z->state = CBZ_HEADER;
    z->piece = 0;
    z->combined = 0;
}

void cbz_begin_piece(cbz *z, int64_t start_bit, int64_t end_bit, uint32_t crc, int level) {
    cbz_seek(z, start_bit);
    z->align_to = start_bit;
    z->state = CBZ_MARK;
    z->piece = 1;
    z->piece_end = end_bit;
    z->piece_crc = crc;
    z->level = level;
    z->combined = 0;
}

/* Skips to the exact start bit after cbz_seek (which starts at its byte). */
static int cbz_align(cbz *z, int64_t bit) {
    int skip = (int)(bit - z->bitpos);
    if (skip > 0) {
        uint32_t ignored;
        CBZ_GET(ignored, skip);
        (void)ignored;
    }
    return CBZ_OK;
}

/* Handles the part between blocks; returns CBZ_OK with state set. */
static int cbz_step(cbz *z) {
    uint32_t v, w;
    if (z->state == CBZ_HEADER) {
        CBZ_GET(v, 32);
        if ((v >> 8) != 0x425a68u || (v & 0xff) < '1' || (v & 0xff) > '9') return CBZ_UNSUPPORTED;
        z->level = (int)(v & 0xff) - '0';
        z->state = CBZ_MARK;
        return CBZ_OK;
    }
    /* CBZ_MARK */
    if (z->align_to > z->bitpos) {
        int r = cbz_align(z, z->align_to);
        if (r != CBZ_OK) return r;
    }
    if (z->piece && z->bitpos == z->piece_end) {
        z->state = CBZ_DONE;
        return CBZ_OK;
    }
    CBZ_GET(v, 24);
    CBZ_GET(w, 24);
    uint64_t mark = ((uint64_t)v << 24) | w;
    if (mark == EOS_MAGIC && !z->piece) {
        CBZ_GET(v, 32);
        if (v != z->combined) return CBZ_UNSUPPORTED; /* libbz2 will say so */
        z->state = CBZ_DONE;
        return CBZ_OK;
    }
    if (mark != BLOCK_MAGIC) return CBZ_UNSUPPORTED;
    /* Test hook: decline the Nth block this decoder meets (see cbspatch_testing_faults). */
    int decline = __atomic_load_n(&cbsp_testing_decline_block, __ATOMIC_RELAXED);
    if (decline > 0 && ++z->test_blocks == decline) return CBZ_UNSUPPORTED;
    int r = cbz_block(z);
    if (r != CBZ_OK) return r;
    /* A piece must be exactly one block: a mark-like pattern inside a block
       ends or starts a piece at the wrong place, which shows here, before
       any output, so the stream can still be decoded the slow way. */
    if (z->piece && (z->bitpos != z->piece_end || z->stored_crc != z->piece_crc)) return CBZ_UNSUPPORTED;
    z->state = CBZ_OUTPUT;
    return CBZ_OK;
}

/* The symbol at *tpos, which moves on to the next position in output order. */
static inline uint8_t cbz_symbol(const cbz *z, const uint32_t *tt, uint32_t *tpos) {
    if (tt != NULL) {
        uint32_t entry = tt[*tpos];
        *tpos = entry >> 8;
        return (uint8_t)(entry & 0xff);
    }
    /* tpos < nblock = cftab[256], so the search stops by symbol 255 */
    uint32_t sym = z->bucket[*tpos >> 10];
    while (z->cftab[sym + 1] <= *tpos) sym++;
    *tpos = cbz_link(z, *tpos);
    return (uint8_t)sym;
}

/* Expands the current block into out[*n..cap) and runs the block CRC over
   it; returns 1 when the block is complete. */
static int cbz_output(cbz *z, uint8_t *out, size_t cap, size_t *n) {
    size_t k = *n, crc_from = k;
    const uint32_t *tt = z->fast ? z->tt : NULL;
    uint32_t tpos = z->tpos, used = z->used, nblock = z->nblock, crc = z->crc;
    int last = z->last, run = z->run;
    for (;;) {
        if (z->pending > 0) {
            size_t room = cap - k;
            size_t m = z->pending < room ? z->pending : room;
            memset(out + k, z->pending_ch, m);
            if (m == CRC_ZERO_RUN && z->pending_ch == 0) {
                crc = crc_update(crc, out + crc_from, k - crc_from);
                crc = crc_after_zero_run(crc);
                crc_from = k + m;
            }
            k += m;
            z->pending -= (uint32_t)m;
            if (z->pending > 0) break;
        }
        if (used == nblock) {
            if (run == 4 && !z->overrun) {
                /* Four equal bytes end the block, so their run count is
                   missing: the block is corrupt. libbz2 reads the count one
                   step past the block's end anyway and writes that run before
                   it reports the error; cbz does the same, so both decoders
                   hand over the same bytes before the same error and an
                   apply's verdict cannot depend on which one decoded. */
                z->overrun = 1;
                z->pending = cbz_symbol(z, tt, &tpos);
                z->pending_ch = (uint8_t)last;
                continue;
            }
            break;
        }
        if (k == cap) break;
        /* Literal symbols until the output is full, the block ends, or a run
           count follows four equal bytes. */
        while (used < nblock && k < cap) {
            uint8_t c = cbz_symbol(z, tt, &tpos);
            used++;
            if (run == 4) {
                z->pending = c;
                z->pending_ch = (uint8_t)last;
                run = 0;
                last = -1;
                break;
            }
            out[k++] = c;
            if (c == last)
                run++;
            else {
                last = c;
                run = 1;
            }
        }
    }
    z->crc = crc_update(crc, out + crc_from, k - crc_from);
    z->tpos = tpos;
    z->used = used;
    z->last = last;
    z->run = run;
    *n = k;
    return used == nblock && z->pending == 0;
}

/* Decodes into out[0..capacity); DECODE_MORE / DECODE_END / DECODE_ERROR.
   On error *before_output says whether the failing block had produced nothing. */
int cbz_run(cbz *z, uint8_t *out, size_t capacity, size_t *produced, cbspatch_status *status, char *message,
            int *before_output) {
    size_t n = 0;
    *before_output = 1;
    while (n < capacity) {
        if (z->state == CBZ_DONE) break;
        if (z->state == CBZ_OUTPUT) {
            int complete = cbz_output(z, out, capacity, &n);
            if (!complete) continue;
            uint32_t crc = ~z->crc;
            if (crc != z->stored_crc) {
                *produced = n;
                *before_output = 0;
                *status = CBSPATCH_ERR_BZIP2;
                snprintf(message, MSG_SIZE, "%s stream: bzip2 data error (block CRC mismatch)", z->name);
                return DECODE_ERROR;
            }
            if (z->run == 4) { /* four equal bytes with no count after them */
                *produced = n;
                *before_output = 0;
                *status = CBSPATCH_ERR_BZIP2;
                snprintf(message, MSG_SIZE, "%s stream: bzip2 data error (block ends inside a run)", z->name);
                return DECODE_ERROR;
            }
            z->combined = ((z->combined << 1) | (z->combined >> 31)) ^ crc;
            z->state = CBZ_MARK;
            continue;
        }
        int r = cbz_step(z);
        if (r != CBZ_OK) {
            *produced = n;
            *status = r == CBZ_IO ? CBSPATCH_ERR_IO : CBSPATCH_ERR_BZIP2;
            if (r == CBZ_IO)
                snprintf(message, MSG_SIZE, "reading the %s stream: %s", z->name,
                         errno != 0 ? strerror(errno) : "short read");
            else
                snprintf(message, MSG_SIZE, "%s stream: not decodable by the fast path (%s)", z->name,
                         r == CBZ_SHORT     ? "truncated"
                         : r == CBZ_CORRUPT ? "corrupt"
                                            : "unusual");
            return DECODE_ERROR;
        }
    }
    *produced = n;
    if (z->state == CBZ_DONE) {
        if (z->piece && z->bitpos != z->piece_end) {
            *status = CBSPATCH_ERR_BZIP2;
            snprintf(message, MSG_SIZE, "%s stream: block does not end at the next mark", z->name);
            return DECODE_ERROR; /* bytes went out, but were CRC-checked */
        }
        return DECODE_END;
    }
    return DECODE_MORE;
}
