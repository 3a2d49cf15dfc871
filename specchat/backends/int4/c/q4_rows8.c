/* 4-bit weights (Q4_0, Q4_1, Q4_K) and 5-bit ones (Q5_0, Q5_1, Q5_K), eight rows interleaved,
 * against x rounded to 8 bits.
 *
 * Laid out once, at load, so that one 32-byte vector holds four consecutive weights of eight
 * rows: the eight rows' sums then sit in the eight lanes of one register, and a group of 32
 * weights costs eight maddubs for all of them, no horizontal sum and one scale multiply
 * (llama.cpp's repacked layout does the same for prompts). For a block of 8 rows and group g,
 * chunk c (0..3) is 32 bytes: byte 4j + b holds row j's weight 8c + b in its low nibble and
 * 8c + 4 + b in its high one. Scales and zeros: [block][group][8], or Q4_K's factored (rows8.h).
 * 5-bit codes (`five`) keep that tile for their low four bits and follow it, group by group, with
 * a 32-byte plane of their fifth (16): plane byte i holds, at bit 2c + h, the fifth bit of chunk
 * c's byte i, low (h 0) or high (h 1) nibble. AVX-512 reads two blocks at once, their chunks
 * laid side by side (rows8.h, `pair_codes`). 5 bits a weight where int8 codes take 8: what
 * llama.cpp reads for Q5, so the pass that waits on memory reads as much as its. A bit reaches
 * its place in two shifts and a mask (AVX2) or one test (AVX-512) a vector.
 * Per row and group the integer sum of 32 products is exact whatever the order (4-bit codes: under
 * 2^15 for all eight maddubs in int16 lanes; 5-bit: under 2^15 for a pair of chunks), then row j,
 * token t:
 *   acc = fma((float)isum, scale * x_scale, acc), group by group; zacc = fma(zero, x_sum, zacc);
 *   result = acc + zacc.
 * A fixed sequence per row and token, so a block of tokens gives each the bits it gets alone,
 * and every level's tile below gives the plain C's bits. */
#include "kernels.h"
#include "rows8.h"
/* A tile of five tokens or more sums each token's low and high nibbles in one chain of vpdpbusd
 * (integers: the same sums in any order): enough chains run side by side to hide the latency,
 * and the add of two chains' sums goes. An 8-token pass took 0.968-0.983x its time behind 256
 * and 768 tokens; at 4 tokens one chain each ran 1.008-1.012x, so fewer keep two (session 55). */
static inline int one_chain(int count) { return count >= 5; }

/* Bytes of one group of 32 of a block of eight rows: the nibble tile, and 5-bit codes' plane. */
static inline int64_t group_bytes(int five) { return five ? 160 : 128; }

/* Row j's code at byte i (4j + b) of chunk c, low (0) or high (1) nibble, its fifth bit added. */
static inline int code_at(const uint8_t *tile, int five, int c, int i, int high) {
    const int nibble = (tile[c * 32 + i] >> (4 * high)) & 15;
    return five ? nibble | ((tile[128 + i] >> (2 * c + high)) & 1) << 4 : nibble;
}

#if defined(HAVE_VNNI512)
/* The AVX-512 VNNI tile: the COUNT tokens of x (a tile, quantize.h) against a pair of blocks of
 * eight rows (a in lanes 0-7, b in 8-15; `codes`: rows8.h), sixteen sums each. A vector holds one
 * chunk of both blocks, whose lanes all need the same four x bytes: vpdpbusd takes them broadcast
 * (no permute), and a group's sums need no halves added. The low and the high nibbles sum apart
 * (two chains of vpdpbusd a token, not one twice as long). Each row's integer sum and float
 * steps are the eight-row tile's, so the same bits. */
static inline __attribute__((always_inline)) void nibbles16_tile(
    const pair_codes *codes, int joined, const void *scales_a, const void *scales_b,
    const void *zeros_a, const void *zeros_b, int form, int five, x_rows x, int64_t cols,
    int count, __m512 *results) {
    const int64_t groups = cols / QGROUP;
    const __m512i low = _mm512_set1_epi8(0x0f), fifth = _mm512_set1_epi8(16);
    __m512 acc[TOKENS], zacc[TOKENS];
    for (int j = 0; j < count; j++) acc[j] = zacc[j] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i sums[TOKENS], highs[TOKENS];
        for (int j = 0; j < count; j++) sums[j] = highs[j] = _mm512_setzero_si512();
        prefetch_ahead(codes->a + g * codes->group_step, codes->group_step);
        /* the plane follows the four chunks, as a fifth */
        const __m512i plane = five ? pair_chunk(codes, joined, g, 4) : _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i raw = pair_chunk(codes, joined, g, c);
            __m512i lo = _mm512_and_si512(raw, low);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
            if (five) { /* a byte's fifth bit (bit 2c + h of the plane): one test, one add */
                lo = _mm512_mask_add_epi8(
                    lo, _mm512_test_epi8_mask(plane, _mm512_set1_epi8((char)(1 << (2 * c)))), lo,
                    fifth);
                hi = _mm512_mask_add_epi8(
                    hi, _mm512_test_epi8_mask(plane, _mm512_set1_epi8((char)(2 << (2 * c)))), hi,
                    fifth);
            }
            for (int j = 0; j < count; j++) {
                const int8_t *bytes = x.codes + QGROUP * (g * x.step + j) + 8 * c;
                int32_t first, second;
                memcpy(&first, bytes, 4);
                memcpy(&second, bytes + 4, 4);
                sums[j] = _mm512_dpbusd_epi32(sums[j], lo, _mm512_set1_epi32(first));
                if (one_chain(count))
                    sums[j] = _mm512_dpbusd_epi32(sums[j], hi, _mm512_set1_epi32(second));
                else
                    highs[j] = _mm512_dpbusd_epi32(highs[j], hi, _mm512_set1_epi32(second));
            }
        }
        const __m512 scale = pair_ps(lanes8(scales_a, g * ROWS8, form), lanes8(scales_b, g * ROWS8, form));
        const __m512 zero = pair_ps(zeros8(zeros_a, scales_a, g * ROWS8, form),
                                    zeros8(zeros_b, scales_b, g * ROWS8, form));
        for (int j = 0; j < count; j++) {
            acc[j] = add_group16(acc[j], one_chain(count) ? sums[j] : _mm512_add_epi32(sums[j], highs[j]),
                                 scale, x.scales + g * x.step + j);
            zacc[j] = add_zero_group16(zacc[j], zero, x.sums + g * x.step + j);
        }
    }
    for (int j = 0; j < count; j++) results[j] = _mm512_add_ps(acc[j], zacc[j]);
}
#elif defined(HAVE_AVX2)
/* The AVX2 tile: the COUNT tokens of x (a tile, quantize.h) against one block of eight rows,
 * their eight sums each, by maddubs (16-bit pair sums) of the low and the high nibbles. */
static inline __attribute__((always_inline)) void nibbles8_tile(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int five,
    x_rows x, int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP, stride = group_bytes(five);
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i fifth = _mm256_set1_epi8(16);
    __m256 acc[TOKENS], zacc[TOKENS];
    for (int j = 0; j < count; j++) acc[j] = zacc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i s16[TOKENS], s32[TOKENS];
        for (int j = 0; j < count; j++) s16[j] = s32[j] = _mm256_setzero_si256();
        prefetch_ahead(codes + g * stride, stride);
        for (int c = 0; c < 4; c++) {
            const uint8_t *tile = codes + g * stride;
            __m256i raw = _mm256_loadu_si256((const __m256i *)(tile + c * 32));
            __asm__("" : "+x"(raw)); /* loaded once: GCC read it twice, once inside the and */
            __m256i lo = _mm256_and_si256(raw, low);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            if (five) { /* bits 2c, 2c + 1 to bit 4: chunks 0-1 from the plane moved up 4 */
                const __m256i plane = _mm256_loadu_si256((const __m256i *)(tile + 128));
                const __m256i from = c < 2 ? _mm256_slli_epi16(plane, 4) : plane;
                const int shift = 2 * (c & 1);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(from, shift), fifth));
                hi = _mm256_or_si256(hi,
                                     _mm256_and_si256(_mm256_srli_epi16(from, shift + 1), fifth));
            }
            for (int j = 0; j < count; j++) {
                const int8_t *bytes = x.codes + QGROUP * (g * x.step + j) + 8 * c;
                int32_t first, second;
                memcpy(&first, bytes, 4);
                memcpy(&second, bytes + 4, 4);
                if (BYTE_DOTS) { /* AVX-VNNI: each chunk's sums straight into int32 lanes */
                    s32[j] = byte_dots(byte_dots(s32[j], lo, _mm256_set1_epi32(first)), hi,
                                       _mm256_set1_epi32(second));
                    continue;
                }
                s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(first)));
                s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(second)));
                /* each token's sums added in order, chunk by chunk: left to itself GCC 12
                 * computed all of a group's maddubs first and spilled them (with `five` a
                 * constant, nibbles8_blocks, a 2-token tile took 0.86x its time; session 65) */
                __asm__("" : "+x"(s16[j]));
            }
            if (five && !BYTE_DOTS && (c & 1)) /* a pair of chunks' 5-bit sums is all int16 lanes hold */
                for (int j = 0; j < count; j++) {
                    s32[j] = _mm256_add_epi32(s32[j], _mm256_madd_epi16(s16[j], ones));
                    s16[j] = _mm256_setzero_si256();
                }
        }
        /* the zero terms group by group beside the products (add_zero_terms' steps in its
         * order, so the same bits): a loop of their own after the groups waited on one chain of
         * fmas per token: merged, a one-token tile took 0.84x its time in cache (session 65) */
        const __m256 scale = lanes8(scales, g * ROWS8, form), zero = zeros8(zeros, scales, g * ROWS8, form);
        for (int j = 0; j < count; j++) {
            const __m256i isum = five || BYTE_DOTS ? s32[j] : _mm256_madd_epi16(s16[j], ones);
            acc[j] = add_group(acc[j], isum, scale, x.scales + g * x.step + j);
            zacc[j] = add_zero_group(zacc[j], zero, x.sums + g * x.step + j);
        }
    }
    for (int j = 0; j < count; j++) results[j] = _mm256_add_ps(acc[j], zacc[j]);
}
#endif

#if defined(HAVE_VNNI512)
/* the pair tile for n tokens (`joined` j), as nibbles16_tokens calls it */
#define NIBBLES16(n, j)                                                                            \
    nibbles16_tile(&codes, j, a->scales, b->scales, a->zeros, b->zeros, form, five,                \
                   (j) ? x_tile_at(q, r, n) : x_rows_at(q, r), cols, n, results)
/* Tokens r .. r + TOKENS - 1 (fewer at the end) against the pair of blocks a and b (`joined`),
 * or token r against an odd last block a (read as its own pair, b's half not stored), stored;
 * how many it took. */
static inline __attribute__((always_inline)) int64_t nibbles16_tokens(
    const block8 *a, const block8 *b, int joined, int form, int five, const int8_rows *q,
    int64_t r, int64_t m, int64_t cols, void *out, int out_is_bf16, int64_t rows) {
    const int count = m - r >= TOKENS ? TOKENS : (int)(m - r);
    const pair_codes codes = pair_at(a->codes, joined, group_bytes(five));
    __m512 results[TOKENS];
    if (joined) {
        BY_COUNT(count, NIBBLES16) /* r starts a tile of `count` tokens (quantize.h) */
    } else {
        NIBBLES16(1, 0); /* an odd last block: rare, its tokens one at a time, each in its tile */
    }
    const int taken = joined ? count : 1;
    store_pair(out, out_is_bf16, r, taken, rows, a, b, joined, results);
    return taken;
}
#undef NIBBLES16
#elif defined(HAVE_AVX2)
/* the tile for n tokens, x's tile with the constant step n, as nibbles8_tokens calls it */
#define NIBBLES8(n)                                                                                \
    nibbles8_tile(codes, scales, zeros, form, five, x_tile_at(q, r, n), cols, n, results)
/* Tokens r .. r + TOKENS - 1 (fewer at the end) against one block, stored; how many it took. */
static inline __attribute__((always_inline)) int64_t nibbles8_tokens(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int five,
    const int8_rows *q, int64_t r, int64_t m, int64_t cols, void *out, int out_is_bf16,
    int64_t rows, int64_t first, int64_t kept) {
    const int count = m - r >= TOKENS ? TOKENS : (int)(m - r);
    __m256 results[TOKENS];
    switch (count) { /* constant counts (r starts a tile of them, quantize.h): sums stay in
                      * registers, x's offsets constant */
    case 4: NIBBLES8(4); break;
    case 3: NIBBLES8(3); break;
    case 2: NIBBLES8(2); break;
    default: NIBBLES8(1); break;
    }
    for (int j = 0; j < count; j++) store_tile(out, out_is_bf16, (r + j) * rows + first, kept, results[j]);
    return count;
}
#undef NIBBLES8
#else
/* The plain C: token r against one block, one row at a time; it took one token. */
static int64_t nibbles8_tokens(const uint8_t *codes, const void *scales, const void *zeros,
                               int form, int five, const int8_rows *q, int64_t r, int64_t m,
                               int64_t cols, void *out, int out_is_bf16, int64_t rows,
                               int64_t first, int64_t kept) {
    (void)m;
    const int64_t groups = cols / QGROUP;
    const int8_t *x = q->codes + r * cols;
    float results[ROWS8];
    for (int j = 0; j < ROWS8; j++) {
        float acc = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            const uint8_t *tile = codes + g * group_bytes(five);
            int32_t isum = 0;
            for (int c = 0; c < 4; c++)
                for (int b = 0; b < 4; b++) {
                    isum += code_at(tile, five, c, 4 * j + b, 0) * x[QGROUP * g + 8 * c + b];
                    isum += code_at(tile, five, c, 4 * j + b, 1) * x[QGROUP * g + 8 * c + 4 + b];
                }
            const float factor = lane_value(scales, g * ROWS8 + j, form) * q->scales[r * q->padded + g];
            acc = fmaf((float)isum, factor, acc);
        }
        results[j] = acc + row_zero_terms(zeros, scales, form, q, r, j, groups);
    }
    store_rows8(out, out_is_bf16, r * rows + first, kept, results);
    return 1;
}
#endif

#if defined(HAVE_VNNI512)
/* Every token against unit `unit` of the matrix: a pair of blocks, or an odd last block. */
static inline __attribute__((always_inline)) void nibbles8_unit(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int five, int64_t rows,
    int64_t cols, int64_t code_bytes, int64_t scale_step, int64_t unit, const int8_rows *q,
    int64_t m, void *out, int32_t out_is_bf16) {
    const int64_t block = unit * TILE_BLOCKS, blocks = (rows + ROWS8 - 1) / ROWS8;
    const block8 a = block_at(codes, scales, zeros, block, code_bytes, scale_step, rows);
    const int pair = block + 1 < blocks;
    const block8 b = pair ? block_at(codes, scales, zeros, block + 1, code_bytes, scale_step, rows) : a;
    for (int64_t r = 0; r < m;)
        r += nibbles16_tokens(&a, &b, pair, form, five, q, r, m, cols, out, out_is_bf16, rows);
}
#else
/* Every token against unit `unit` of the matrix: one block. */
static inline __attribute__((always_inline)) void nibbles8_unit(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int five, int64_t rows,
    int64_t cols, int64_t code_bytes, int64_t scale_step, int64_t unit, const int8_rows *q,
    int64_t m, void *out, int32_t out_is_bf16) {
    const block8 a = block_at(codes, scales, zeros, unit, code_bytes, scale_step, rows);
    for (int64_t r = 0; r < m;)
        r += nibbles8_tokens(a.codes, a.scales, a.zeros, form, five, q, r, m, cols, out,
                             out_is_bf16, rows, a.first, a.kept);
}
#endif

/* out[m][n] = sum_k x[m][k] * w[n][k] for 4-bit (or, `five`, 5-bit) weights interleaved by
 * eight rows (above), x rounded to 8 bits per 32 (quantize_groups). rows need not be a multiple
 * of 8: the last block's missing rows are zeros in the layout and are not stored. */
static inline __attribute__((always_inline)) void nibbles8_blocks(
    const uint8_t *codes, const void *scales, const void *zeros, int form, int five,
    int64_t rows, int64_t cols, const void *x, int x_is_bf16, int8_rows *q, int64_t m, void *out,
    int32_t out_is_bf16, int32_t threads) {
    const int64_t blocks = (rows + ROWS8 - 1) / ROWS8, groups = cols / QGROUP;
    const int64_t code_bytes = groups * group_bytes(five), scale_step = scale_bytes(groups, form);
    const int64_t units = (blocks + TILE_BLOCKS - 1) / TILE_BLOCKS;
    const int shared = SHARED_ROUNDING(m, threads);
    if (!shared) quantize_groups(x, x_is_bf16, m, cols, 0, q);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        if (shared) quantize_groups(x, x_is_bf16, m, cols, 0, q); /* its omp for ends on a barrier */
        /* `five` a constant in each loop, so each tile keeps its own code: GCC outlines one
         * function for a parallel region whatever constant its caller passes, and with `five` a
         * variable the 4- and 5-bit tiles shared one code and its registers (with the sums in
         * order, nibbles8_tile, a pass took 0.95-0.97x its time at avx2; session 65) */
        if (five) {
#pragma omp for schedule(static)
            for (int64_t unit = 0; unit < units; unit++)
                nibbles8_unit(codes, scales, zeros, form, 1, rows, cols, code_bytes, scale_step,
                              unit, q, m, out, out_is_bf16);
        } else {
#pragma omp for schedule(static)
            for (int64_t unit = 0; unit < units; unit++)
                nibbles8_unit(codes, scales, zeros, form, 0, rows, cols, code_bytes, scale_step,
                              unit, q, m, out, out_is_bf16);
        }
    }
}

void matmul_nibbles8(const uint8_t *codes, const void *scales, const void *zeros, int form,
                     int five, int64_t rows, int64_t cols, const void *x, int x_is_bf16, int64_t m, void *out,
                     int32_t out_is_bf16, int32_t threads) {
    int8_rows q;
    alloc_int8_rows(m, cols, 0, &q);
    nibbles8_blocks(codes, scales, zeros, form, five, rows, cols, x, x_is_bf16, &q, m, out, out_is_bf16,
                    threads);
    free_int8_rows(&q);
}

/* Blocks of eight rows a tile takes in this build: RowsLinear lays the codes of pairs side by
 * side where it is 2 (rows8.h). */
void tile_blocks(int32_t *out) { *out = TILE_BLOCKS; }
