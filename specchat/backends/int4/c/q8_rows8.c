/* int8 weights in groups of 32 or 16 (Q8_0; Q6_K), eight rows interleaved, against x rounded to
 * 8 bits. (Q5_0, Q5_1 and Q5_K run as 5-bit codes, q4_rows8.c; as int8 codes here, with their
 * zeros, they are what the tests hold those to.)
 *
 * As q4_rows8.c's layout, for codes a byte each: per block of 8 rows and group g of 32, chunk c
 * (0..7) is 32 bytes, byte 4j + b holding row j's weight 32g + 4c + b; scales
 * [block][group][sub][8], `sub` scales a group (2 for Q6_K's groups of 16: chunks 0-3, then 4-7);
 * AVX-512 reads two blocks at once, their chunks laid side by side (rows8.h, `pair_codes`).
 * Row j, token t, per scale's part h: isum = its exact integer sum of products; acc =
 * fma((float)isum, scale * x_scale, acc), part by part, group by group. AVX2 multiplies |w| by x
 * with w's sign (maddubs takes an unsigned operand; |w| and |x| <= 127, so pairs never
 * saturate); VNNI multiplies w + 128 (w xor 0x80, unsigned) and takes 128 times x's sum over the
 * part back off: the same integers either way, and the plain C's. Zeros (Q5_1, Q5_K: groups
 * of 32) add zero * x's group sum, group by group, after the products, as q4_rows8.c's do. */
#include "kernels.h"
#include "rows8.h"

#if defined(HAVE_VNNI512)
/* x's integer sum over part h of group g (of `sub`), token j of x's tile */
static inline int32_t part_sum(const x_rows *x, int j, int64_t g, int sub, int h) {
    const int32_t all = x->isums[g * x->step + j];
    if (sub == 1) return all;
    const int32_t low = x->lows[g * x->step + j];
    return h == 0 ? low : all - low;
}

/* The AVX-512 VNNI tile: the COUNT tokens of x (a tile, quantize.h) against a pair of blocks (a
 * in lanes 0-7, b in 8-15; `codes`: rows8.h), sixteen sums each. A vector holds one chunk of both
 * blocks, whose lanes all need the same four x bytes: vpdpbusd takes them broadcast, and a
 * group's sums need no halves added. Every row's integer sums and float steps are the eight-row
 * tile's, so the same bits. */
static inline __attribute__((always_inline)) void int8x16_tile(
    const pair_codes *codes, int joined, const void *scales_a, const void *scales_b,
    const void *zeros_a, const void *zeros_b, int form, int sub, x_rows x, int64_t cols,
    int count, __m512 *results) {
    const int64_t groups = cols / QGROUP;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[TOKENS];
    for (int j = 0; j < count; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i sums[2][TOKENS]; /* [part][token] */
        for (int j = 0; j < count; j++) sums[0][j] = sums[1][j] = _mm512_setzero_si512();
        prefetch_ahead(codes->a + g * codes->group_step, codes->group_step);
        /* unrolled whole so that sums[h][j] stay in registers: GCC left the loop rolled at 8
         * tokens, and Q6_K's pass of 8 cost 3.3 times its pass of 4 (1.7B shape, in cache) */
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const int h = sub == 2 && c >= 4;
            const __m512i unsigned_w = _mm512_xor_si512(pair_chunk(codes, joined, g, c), flip);
            for (int j = 0; j < count; j++) {
                int32_t four;
                memcpy(&four, x.codes + QGROUP * (g * x.step + j) + 4 * c, 4);
                sums[h][j] = _mm512_dpbusd_epi32(sums[h][j], unsigned_w, _mm512_set1_epi32(four));
            }
        }
        for (int h = 0; h < sub; h++) {
            const __m512 scale = pair_ps(lanes8(scales_a, (g * sub + h) * ROWS8, form),
                                         lanes8(scales_b, (g * sub + h) * ROWS8, form));
            for (int j = 0; j < count; j++) {
                const __m512i taken = _mm512_set1_epi32(128 * part_sum(&x, j, g, sub, h));
                const __m512i isum = _mm512_sub_epi32(sums[h][j], taken);
                acc[j] = add_group16(acc[j], isum, scale, x.scales + g * x.step + j);
            }
        }
    }
    if (zeros_a)
        add_zero_terms16(zeros_a, zeros_b, scales_a, scales_b, form, x, groups, count, acc,
                         results);
    else
        for (int j = 0; j < count; j++) results[j] = acc[j];
}
#elif defined(HAVE_AVX2)
/* The AVX2 tile: the COUNT tokens of x (a tile, quantize.h) against one block, eight sums each. */
static inline __attribute__((always_inline)) void int8x8_tile(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, x_rows x,
    int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP;
    __m256 acc[TOKENS];
    for (int j = 0; j < count; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i sums[2][TOKENS];
        for (int j = 0; j < count; j++) sums[0][j] = sums[1][j] = _mm256_setzero_si256();
        prefetch_ahead(codes + g * 8 * 32, 8 * 32);
        for (int c = 0; c < 8; c++) {
            const int h = sub == 2 && c >= 4;
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(codes + (g * 8 + c) * 32));
            const __m256i magnitudes = _mm256_sign_epi8(raw, raw);
            for (int j = 0; j < count; j++) {
                int32_t four;
                memcpy(&four, x.codes + QGROUP * (g * x.step + j) + 4 * c, 4);
                const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(four), raw);
                sums[h][j] = byte_dots(sums[h][j], magnitudes, signed_x);
                __asm__("" : "+x"(sums[h][j])); /* in order, as q4_rows8.c's: 0.96-0.98x */
            }
        }
        for (int h = 0; h < sub; h++) {
            const __m256 scale = lanes8(scales, (g * sub + h) * ROWS8, form);
            for (int j = 0; j < count; j++)
                acc[j] = add_group(acc[j], sums[h][j], scale, x.scales + g * x.step + j);
        }
    }
    if (zeros)
        add_zero_terms(zeros, scales, form, x, groups, count, acc, results);
    else
        for (int j = 0; j < count; j++) results[j] = acc[j];
}
#endif

#if defined(HAVE_VNNI512)
/* the pair tile for n tokens (`joined` j), as int8x16_tiles calls it */
#define INT8X16(n, j)                                                                              \
    int8x16_tile(codes, j, a->scales, b->scales, a->zeros, b->zeros, form, sub,                    \
                 (j) ? x_tile_at(q, r, n) : x_rows_at(q, r), cols, n, results)
/* int8x16_tile for TOKENS or fewer tokens, with the count and the parts constants. */
static inline __attribute__((always_inline)) void int8x16_tiles(
    const pair_codes *codes, int joined, const block8 *a, const block8 *b, int form, int sub,
    const int8_rows *q, int64_t r, int64_t cols, int count, __m512 *results) {
    if (!joined) {
        INT8X16(1, 0); /* an odd last block: rare, its tokens one at a time, each in its tile */
        return;
    }
    BY_COUNT(count, INT8X16) /* r starts a tile of `count` tokens (quantize.h) */
}
#undef INT8X16

/* Tokens r .. r + TOKENS - 1 (fewer at the end) against the pair of blocks a and b (`joined`),
 * or token r against an odd last block a (read as its own pair, b's half not stored), stored;
 * how many it took. */
static inline __attribute__((always_inline)) int64_t int8x16_tokens(
    const block8 *a, const block8 *b, int joined, int form, int sub, const int8_rows *q,
    int64_t r, int64_t m, int64_t cols, void *out, int out_is_bf16, int64_t rows) {
    const int count = m - r >= TOKENS ? TOKENS : (int)(m - r);
    const pair_codes codes = pair_at(a->codes, joined, 8 * 32);
    __m512 results[TOKENS];
    if (sub == 2) /* constant parts: sums stay in registers */
        int8x16_tiles(&codes, joined, a, b, form, 2, q, r, cols, count, results);
    else
        int8x16_tiles(&codes, joined, a, b, form, 1, q, r, cols, count, results);
    const int taken = joined ? count : 1;
    store_pair(out, out_is_bf16, r, taken, rows, a, b, joined, results);
    return taken;
}
#elif defined(HAVE_AVX2)
#define INT8X8(n) int8x8_tile(codes, scales, zeros, form, sub, x_tile_at(q, r, n), cols, n, results)
/* int8x8_tile for TOKENS or fewer tokens, with the count and the parts constants. */
static inline __attribute__((always_inline)) void int8x8_tiles(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, const int8_rows *q, int64_t r,
    int64_t cols, int count, __m256 *results) {
    switch (count) { /* r starts a tile of `count` tokens (quantize.h): its step a constant */
    case 4: INT8X8(4); break;
    case 3: INT8X8(3); break;
    case 2: INT8X8(2); break;
    default: INT8X8(1); break;
    }
}
#undef INT8X8

/* Tokens r .. r + TOKENS - 1 (fewer at the end) against one block, stored; how many it took. */
static inline __attribute__((always_inline)) int64_t int8x8_tokens(const uint8_t *codes, const void *scales, const void *zeros, int form, int sub,
                                    const int8_rows *q, int64_t r, int64_t m, int64_t cols,
                                    void *out, int out_is_bf16, int64_t rows, int64_t first,
                                    int64_t kept) {
    const int count = m - r >= TOKENS ? TOKENS : (int)(m - r);
    __m256 results[TOKENS];
    if (sub == 2) /* constant parts: sums stay in registers */
        int8x8_tiles(codes, scales, zeros, form, 2, q, r, cols, count, results);
    else
        int8x8_tiles(codes, scales, zeros, form, 1, q, r, cols, count, results);
    for (int j = 0; j < count; j++) store_tile(out, out_is_bf16, (r + j) * rows + first, kept, results[j]);
    return count;
}
#else
/* The plain C: token r against one block, one row at a time; it took one token. */
static int64_t int8x8_tokens(const uint8_t *codes, const void *scales, const void *zeros, int form, int sub,
                             const int8_rows *q, int64_t r, int64_t m, int64_t cols, void *out,
                             int out_is_bf16, int64_t rows, int64_t first, int64_t kept) {
    (void)m;
    const int64_t groups = cols / QGROUP;
    const int8_t *x = q->codes + r * cols;
    float results[ROWS8];
    for (int j = 0; j < ROWS8; j++) {
        float acc = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            int32_t isum[2] = {0, 0};
            for (int c = 0; c < 8; c++)
                for (int b = 0; b < 4; b++)
                    isum[sub == 2 && c >= 4] +=
                        (int8_t)codes[(g * 8 + c) * 32 + 4 * j + b] * x[QGROUP * g + 4 * c + b];
            for (int h = 0; h < sub; h++) {
                const float factor = lane_value(scales, (g * sub + h) * ROWS8 + j, form) *
                                     q->scales[r * q->padded + g];
                acc = fmaf((float)isum[h], factor, acc);
            }
        }
        results[j] = zeros ? acc + row_zero_terms(zeros, scales, form, q, r, j, groups) : acc;
    }
    store_rows8(out, out_is_bf16, r * rows + first, kept, results);
    return 1;
}
#endif

#if defined(HAVE_VNNI512)
/* Every token against unit `unit` of the matrix: a pair of blocks, or an odd last block. */
static inline __attribute__((always_inline)) void int8x8_unit(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, int64_t rows,
    int64_t cols, int64_t code_bytes, int64_t scale_step, int64_t unit, const int8_rows *q,
    int64_t m, void *out, int32_t out_is_bf16) {
    const int64_t block = unit * TILE_BLOCKS, blocks = (rows + ROWS8 - 1) / ROWS8;
    const block8 a = block_at(codes, scales, zeros, block, code_bytes, scale_step, rows);
    const int pair = block + 1 < blocks;
    const block8 b = pair ? block_at(codes, scales, zeros, block + 1, code_bytes, scale_step, rows) : a;
    for (int64_t r = 0; r < m;)
        r += int8x16_tokens(&a, &b, pair, form, sub, q, r, m, cols, out, out_is_bf16, rows);
}
#else
/* Every token against unit `unit` of the matrix: one block. */
static inline __attribute__((always_inline)) void int8x8_unit(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, int64_t rows,
    int64_t cols, int64_t code_bytes, int64_t scale_step, int64_t unit, const int8_rows *q,
    int64_t m, void *out, int32_t out_is_bf16) {
    const block8 a = block_at(codes, scales, zeros, unit, code_bytes, scale_step, rows);
    for (int64_t r = 0; r < m;)
        r += int8x8_tokens(a.codes, a.scales, a.zeros, form, sub, q, r, m, cols, out, out_is_bf16,
                           rows, a.first, a.kept);
}
#endif

void matmul_int8x8(const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, int64_t rows,
                   int64_t cols, const void *x, int x_is_bf16, int64_t m, void *out, int32_t out_is_bf16,
                   int32_t threads) {
    int8_rows q;
    alloc_int8_rows(m, cols, sub == 2, &q);
    const int64_t blocks = (rows + ROWS8 - 1) / ROWS8, groups = cols / QGROUP;
    const int64_t code_bytes = groups * 8 * 32, scale_step = scale_bytes(groups * sub, form);
    const int64_t units = (blocks + TILE_BLOCKS - 1) / TILE_BLOCKS;
    const int shared = SHARED_ROUNDING(m, threads);
    if (!shared) quantize_groups(x, x_is_bf16, m, cols, sub == 2, &q);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        if (shared) quantize_groups(x, x_is_bf16, m, cols, sub == 2, &q); /* ends on a barrier */
#pragma omp for schedule(static)
        for (int64_t unit = 0; unit < units; unit++)
            int8x8_unit(codes, scales, zeros, form, sub, rows, cols, code_bytes, scale_step, unit,
                        &q, m, out, out_is_bf16);
    }
    free_int8_rows(&q);
}
