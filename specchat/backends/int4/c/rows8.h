/* What the two weight formats interleaved by eight rows (q4_rows8.c, q8_rows8.c) share: their
 * scales as stored, one group's step of a tile, and how a block's eight outputs are stored.
 *
 * Scales and zeros come in one of three forms, `form`: float32 (0); float16 (1) where the file's
 * are exactly that (Q4_0, Q4_1, Q8_0, Q5_0: a fifth fewer bytes to read a token); or, for the
 * K-quants' products of two scales (Q4_K, Q6_K), as the file stores them (form F > 1): per block
 * of 8 rows and run of F groups, the rows' 8 float16 factors, then per group the rows' 8 int8
 * multipliers. factor * multiplier is exact in float32 (11 by 8 significant bits), so every form
 * gives the same values. Q4_0's zeros are -8 * scale, exact in float, so they are not stored at
 * all (zeros NULL). */
#ifndef SPECCHAT_ROWS8_H
#define SPECCHAT_ROWS8_H

#include "quantize.h"

#define ROWS8 8
#if defined(HAVE_VNNI512)
#define TILE_BLOCKS 2 /* blocks of eight rows a tile takes: AVX-512's a pair (16 lanes) */
#else
#define TILE_BLOCKS 1
#endif

/* One block of eight rows: its codes, scales and zeros, its first row and how many it holds. */
typedef struct {
    const uint8_t *codes;
    const void *scales, *zeros;
    int64_t first, kept;
} block8;

/* Block `block` of a matrix of `rows` rows whose blocks take `code_bytes` and `scale_bytes`. */
static inline block8 block_at(const uint8_t *codes, const void *scales, const void *zeros,
                              int64_t block, int64_t code_bytes, int64_t scale_bytes,
                              int64_t rows) {
    const int64_t at = block * scale_bytes, first = block * ROWS8;
    return (block8){codes + block * code_bytes, (const char *)scales + at,
                    zeros ? (const char *)zeros + at : NULL, first,
                    rows - first < ROWS8 ? rows - first : ROWS8};
}

/* Bytes of `units` groups' scales of one block of 8 rows, in `form`. */
static inline int64_t scale_bytes(int64_t units, int form) {
    return form == 0 ? units * ROWS8 * 4 : form == 1 ? units * ROWS8 * 2 : units / form * (16 + ROWS8 * form);
}

/* Where a factored run's bytes start, for lane `at` (group at / 8, row at % 8); `form` is a
 * power of two (8 or 16), so this is shifts, not divisions, in every group's step. */
static inline const uint8_t *factored_run(const void *values, int64_t at, int form) {
    return (const uint8_t *)values + (at >> (3 + __builtin_ctz((unsigned)form))) * (16 + ROWS8 * form);
}

static inline float lane_value(const void *values, int64_t at, int form) {
    if (form == 0) return ((const float *)values)[at];
    if (form == 1) return from_half(((const uint16_t *)values)[at]);
    const uint8_t *run = factored_run(values, at, form);
    const int64_t row = at & (ROWS8 - 1), unit = (at >> 3) & (form - 1);
    uint16_t factor;
    memcpy(&factor, run + 2 * row, 2);
    return from_half(factor) * (float)((const int8_t *)run)[16 + ROWS8 * unit + row];
}
static inline float zero_value(const void *zeros, const void *scales, int64_t at, int form) {
    return zeros ? lane_value(zeros, at, form) : -8.0f * lane_value(scales, at, form);
}

/* The plain C's zero terms of row j, token r: zero * x's group sum, group by group (the vector
 * tiles' add_zero_terms, one lane). */
static inline float row_zero_terms(const void *zeros, const void *scales, int form,
                                   const int8_rows *q, int64_t r, int j, int64_t groups) {
    float zacc = 0.0f;
    for (int64_t g = 0; g < groups; g++)
        zacc = fmaf(zero_value(zeros, scales, g * ROWS8 + j, form), q->sums[r * q->padded + g], zacc);
    return zacc;
}
/* values[0 .. count-1] to out[first ...]: count is under ROWS8 only in a matrix's last block. */
static inline void store_rows8(void *out, int out_is_bf16, int64_t first, int64_t count,
                               const float values[ROWS8]) {
    for (int64_t i = 0; i < count; i++) store_result(out, out_is_bf16, first + i, values[i]);
}

#if defined(HAVE_AVX2)
/* How far ahead of the group it works on a tile asks for the codes it will read: a tile of
 * three or more tokens computes long enough per byte that the hardware's own prefetch falls
 * behind (an 8B shape's 4-token pass stalled on each group's first load), and on an Intel Xeon
 * a tile of one or two tokens did too: asked ahead, a one-token pass of the bundled model took
 * 0.87x its time, 1.7B Q4_K_M's 0.80x (avx512) and 0.72x (avx2). On the AMD EPYC, where it was
 * first tried for small tiles, a 2-token pass read 1.02-1.05x (docs/bench-log.md, session 44).
 * Each line is asked for twice: PREFETCH_BYTES ahead into L1, and PREFETCH_FAR_BYTES ahead into
 * L2 only, which keeps more of the stream in flight than L1's few fill buffers can: a pass still
 * read the weights at about half what two threads read alone (59 GB/s cache-resident on the
 * Xeon), and with the far request it took 0.89-0.93x its time at 1 token, 0.86-0.92x at 2,
 * 0.88-0.95x at 4 and 8 (avx2: 0.86x at 1 and 2), the same bits (session 56).
 * always_inline: GCC 12 left this out of line in the tiles and dropped the prefetches from it. */
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 2048
#endif
#ifndef PREFETCH_FAR_BYTES
#define PREFETCH_FAR_BYTES 16384
#endif
/* The `bytes` of codes PREFETCH_BYTES and PREFETCH_FAR_BYTES past `here`, asked for, a line at a
 * time. */
static inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t *here, int64_t bytes) {
    for (int64_t line = 0; line < bytes; line += 64) {
        _mm_prefetch((const char *)here + PREFETCH_BYTES + line, _MM_HINT_T0);
        _mm_prefetch((const char *)here + PREFETCH_FAR_BYTES + line, _MM_HINT_T1);
    }
}

/* acc + each int32 lane's four products of unsigned bytes u8 and signed bytes s8: one
 * instruction with AVX-VNNI (BYTE_DOTS), else maddubs's pairs (|products| under 2^15 as the
 * callers keep them) widened and added. The same exact integers either way. */
#if defined(HAVE_AVXVNNI)
#define BYTE_DOTS 1
static inline __m256i byte_dots(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_avx_epi32(acc, u8, s8);
}
#else
#define BYTE_DOTS 0
static inline __m256i byte_dots(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
}
#endif

static inline __m256 lanes8(const void *values, int64_t at, int form) {
    if (form == 0) return _mm256_loadu_ps((const float *)values + at);
    if (form == 1)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)values + at)));
    const uint8_t *run = factored_run(values, at, form);
    const __m256 factors = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)run));
    const __m128i eight = _mm_loadl_epi64((const __m128i *)(run + 16 + (at & (ROWS8 * form - 1))));
    return _mm256_mul_ps(factors, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)));
}
static inline __m256 zeros8(const void *zeros, const void *scales, int64_t at, int form) {
    return zeros ? lanes8(zeros, at, form) : _mm256_mul_ps(lanes8(scales, at, form), _mm256_set1_ps(-8.0f));
}

/* acc + group g's exact integer sums of token r times (weight scale * x scale): one step of
 * every eight-row tile, in this order at every level. */
static inline __m256 add_group(__m256 acc, __m256i isum, __m256 scale, const float *x_scale) {
    const __m256 factor = _mm256_mul_ps(scale, _mm256_broadcast_ss(x_scale));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), factor, acc);
}

/* zacc + group g's zero term of token r (zero * x's group sum): one step of every eight-row
 * tile's zero terms, in this order at every level. */
static inline __m256 add_zero_group(__m256 zacc, __m256 zero, const float *x_sum) {
    return _mm256_fmadd_ps(zero, _mm256_broadcast_ss(x_sum), zacc);
}

/* A tile's last step where its weights have zeros (Q4_1, Q4_K, Q5_1, Q5_K): each token's zero
 * terms (zero * x's group sum of 32, group by group) added to its sums. */
static inline __attribute__((always_inline)) void add_zero_terms(
    const void *zeros, const void *scales, int form, x_rows x, int64_t groups, int count,
    const __m256 *acc, __m256 *results) {
    __m256 zacc[TOKENS];
    for (int j = 0; j < count; j++) zacc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        const __m256 zero = zeros8(zeros, scales, g * ROWS8, form);
        for (int j = 0; j < count; j++)
            zacc[j] = add_zero_group(zacc[j], zero, x.sums + g * x.step + j);
    }
    for (int j = 0; j < count; j++) results[j] = _mm256_add_ps(acc[j], zacc[j]);
}

#if defined(HAVE_VNNI512)
/* Two blocks of eight rows side by side (AVX-512's tiles take a pair: block a in lanes 0-7, b in
 * 8-15), each lane computed by the eight-row tile's sequence, so the same bits. */
static inline __m512 pair_ps(__m256 a, __m256 b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)),
                                               _mm256_castps_pd(b), 1));
}
static inline __m256 high_ps(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
static inline __m512i pair_si(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Where an AVX-512 tile's codes lie. Blocks are laid in pairs (`joined`: RowsLinear lays them so
 * for these builds): chunk c of group g is a's 32 bytes at a + g * group_step + c * 64 and b's
 * right after, one 64-byte load for both, one stream of bytes as the eight-row layout was. A
 * matrix's odd last block is read as its own pair (b = a, its own layout). */
typedef struct {
    const uint8_t *a, *b;
    int64_t group_step, chunk_step;
    int joined;
} pair_codes;

static inline pair_codes pair_at(const uint8_t *codes, int joined, int64_t group_bytes) {
    return joined ? (pair_codes){codes, codes + 32, 2 * group_bytes, 64, 1}
                  : (pair_codes){codes, codes, group_bytes, 32, 0};
}

/* Chunk `c` (32 bytes each) of group g of both blocks: a in the low half, b in the high. */
static inline __m512i pair_chunk(const pair_codes *codes, int joined, int64_t g, int c) {
    const uint8_t *a = codes->a + g * codes->group_step + c * codes->chunk_step;
    if (joined) return _mm512_loadu_si512((const void *)a);
    return pair_si(a, codes->b + g * codes->group_step + c * codes->chunk_step);
}

/* TILE(n, 1) for a pair tile of `count` tokens, n a constant (the tile's sums then stay in
 * registers), 1 to TOKENS. */
#define BY_COUNT(count, TILE)                                                                       \
    switch (count) {                                                                               \
    case 8: TILE(8, 1); break;                                                                     \
    case 7: TILE(7, 1); break;                                                                     \
    case 6: TILE(6, 1); break;                                                                     \
    case 5: TILE(5, 1); break;                                                                     \
    case 4: TILE(4, 1); break;                                                                     \
    case 3: TILE(3, 1); break;                                                                     \
    case 2: TILE(2, 1); break;                                                                     \
    default: TILE(1, 1); break;                                                                    \
    }

/* add_group for a pair of blocks. */
static inline __m512 add_group16(__m512 acc, __m512i isum, __m512 scale, const float *x_scale) {
    const __m512 factor = _mm512_mul_ps(scale, _mm512_set1_ps(*x_scale));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), factor, acc);
}

/* add_zero_group for a pair of blocks. */
static inline __m512 add_zero_group16(__m512 zacc, __m512 zero, const float *x_sum) {
    return _mm512_fmadd_ps(zero, _mm512_set1_ps(*x_sum), zacc);
}

/* add_zero_terms for a pair of blocks (zeros a and b, scales a and b). */
static inline __attribute__((always_inline)) void add_zero_terms16(
    const void *zeros_a, const void *zeros_b, const void *scales_a, const void *scales_b,
    int form, x_rows x, int64_t groups, int count, const __m512 *acc, __m512 *results) {
    __m512 zacc[TOKENS];
    for (int j = 0; j < count; j++) zacc[j] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        const __m512 zero = pair_ps(zeros8(zeros_a, scales_a, g * ROWS8, form),
                                    zeros8(zeros_b, scales_b, g * ROWS8, form));
        for (int j = 0; j < count; j++)
            zacc[j] = add_zero_group16(zacc[j], zero, x.sums + g * x.step + j);
    }
    for (int j = 0; j < count; j++) results[j] = _mm512_add_ps(acc[j], zacc[j]);
}
#endif

/* store_rows8 for a tile's eight sums in one register. */
static inline void store_tile(void *out, int out_is_bf16, int64_t first, int64_t count, __m256 sums) {
    if (count == ROWS8) {
        if (out_is_bf16)
            to_bf16x8(sums, (bf16 *)out + first);
        else
            _mm256_storeu_ps((float *)out + first, sums);
        return;
    }
    float values[ROWS8];
    _mm256_storeu_ps(values, sums);
    store_rows8(out, out_is_bf16, first, count, values);
}

#if defined(HAVE_VNNI512)
/* A pair tile's sums stored: tokens r .. r + taken - 1, block a's lanes, and b's where the
 * pair is `joined` (an odd last block has no b). */
static inline void store_pair(void *out, int out_is_bf16, int64_t r, int taken, int64_t rows,
                              const block8 *a, const block8 *b, int joined, const __m512 *results) {
    for (int j = 0; j < taken; j++) {
        store_tile(out, out_is_bf16, (r + j) * rows + a->first, a->kept, _mm512_castps512_ps256(results[j]));
        if (joined) store_tile(out, out_is_bf16, (r + j) * rows + b->first, b->kept, high_ps(results[j]));
    }
}
#endif
#endif

#endif
