/* What the two weight formats interleaved by eight rows (q4_rows8.c, q8_rows8.c) share: their
 * scales as stored, one group's step of a tile, and how a block's eight outputs are stored.
 *
 * Scales and zeros are float16 where the file's are exactly that (Q4_0, Q4_1: a fifth fewer bytes
 * to read a token), float32 otherwise (Q4_K's products of two scales); the same values either way.
 * Q4_0's zeros are -8 * scale, exact in float, so they are not stored at all (zeros NULL). */
#ifndef SPECCHAT_ROWS8_H
#define SPECCHAT_ROWS8_H

#include "quantize.h"

#define ROWS8 8
#define TOKENS 4 /* tokens a vector tile takes at once: their sums stay in registers */

static inline float lane_value(const void *values, int64_t at, int half) {
    return half ? from_half(((const uint16_t *)values)[at]) : ((const float *)values)[at];
}
static inline float zero_value(const void *zeros, const void *scales, int64_t at, int half) {
    return zeros ? lane_value(zeros, at, half) : -8.0f * lane_value(scales, at, half);
}

/* values[0 .. count-1] to out[first ...]: count is under ROWS8 only in a matrix's last block. */
static inline void store_rows8(void *out, int out_is_bf16, int64_t first, int64_t count,
                               const float values[ROWS8]) {
    for (int64_t i = 0; i < count; i++) store_result(out, out_is_bf16, first + i, values[i]);
}

#if defined(HAVE_AVX2)
static inline __m256 lanes8(const void *values, int64_t at, int half) {
    return half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)values + at)))
                : _mm256_loadu_ps((const float *)values + at);
}
static inline __m256 zeros8(const void *zeros, const void *scales, int64_t at, int half) {
    return zeros ? lanes8(zeros, at, half) : _mm256_mul_ps(lanes8(scales, at, half), _mm256_set1_ps(-8.0f));
}

/* acc + group g's exact integer sums of token r times (weight scale * x scale): one step of
 * every eight-row tile, in this order at every level. */
static inline __m256 add_group(__m256 acc, __m256i isum, __m256 scale, const int8_rows *q,
                               int64_t r, int64_t g) {
    const __m256 factor = _mm256_mul_ps(scale, _mm256_broadcast_ss(q->scales + r * q->padded + g));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), factor, acc);
}

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
#endif

#endif
