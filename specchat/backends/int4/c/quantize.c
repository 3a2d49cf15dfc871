/* x rounded to 8 bits per group of 32 (quantize.h): codes, the group's scale and its sums. */
#include "quantize.h"

/* One group of 32: its codes, scale, integer sum and first-half integer sum. */
typedef struct {
    float scale;
    int32_t sum, low;
} group_code;

#if defined(HAVE_AVX2)
/* 8 values at a time: max and integer sums are order-free, and cvtps rounds to nearest even as
 * nearbyintf does, so the plain C's codes and sums. Inlined: called out of line, a group's
 * return through the stack and the vzeroupper after it took 5% of a decode (perf, session 41;
 * inlined, passes ran 4-10% faster at both levels). */
static inline __attribute__((always_inline)) group_code quantize_group(const float *xg, int8_t *cg) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], most = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(xg + 8 * i);
        most = _mm256_max_ps(_mm256_and_ps(v[i], magnitude), most); /* NaN: skipped */
    }
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_shuffle_ps(half, half, 1));
    const float top = _mm_cvtss_f32(half);
    const float scale = top / 127.0f, inverse = top > 0.0f ? 1.0f / scale : 0.0f;
    __m256i codes[4], total = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        codes[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inverse)));
        total = _mm256_add_epi32(total, codes[i]);
    }
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]),
                           _mm256_packs_epi32(codes[2], codes[3])),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)cg, bytes);
    __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
    const __m256i first = _mm256_add_epi32(codes[0], codes[1]);
    __m128i low = _mm_add_epi32(_mm256_castsi256_si128(first), _mm256_extracti128_si256(first, 1));
    low = _mm_add_epi32(low, _mm_shuffle_epi32(low, 0x4e));
    low = _mm_add_epi32(low, _mm_shuffle_epi32(low, 0xb1));
    return (group_code){scale, _mm_cvtsi128_si32(sum), _mm_cvtsi128_si32(low)};
}
#else
static inline __attribute__((always_inline)) group_code quantize_group(const float *xg, int8_t *cg) {
    float top = 0.0f; /* the largest magnitude: the same in any order */
    for (int i = 0; i < QGROUP; i++) {
        const float magnitude = fabsf(xg[i]);
        top = magnitude > top ? magnitude : top;
    }
    const float scale = top / 127.0f, inverse = top > 0.0f ? 1.0f / scale : 0.0f;
    int32_t sum = 0, low = 0;
    for (int i = 0; i < QGROUP; i++) {
        cg[i] = (int8_t)(int32_t)nearbyintf(xg[i] * inverse);
        sum += cg[i];
        low += i < QGROUP / 2 ? cg[i] : 0;
    }
    return (group_code){scale, sum, low};
}
#endif

void alloc_int8_rows(int64_t m, int64_t cols, int halves, int8_rows *q) {
    const int64_t groups = cols / QGROUP;
    q->padded = (groups + 7) / 8 * 8;
    q->m = m, q->cols = cols;
    q->codes = malloc((size_t)(m * cols));
    q->scales = calloc((size_t)(m * q->padded), sizeof(float));
    q->sums = calloc((size_t)(m * q->padded), sizeof(float));
    q->isums = calloc((size_t)(m * q->padded), sizeof(int32_t));
    q->lows = halves ? calloc((size_t)(m * q->padded), sizeof(int32_t)) : NULL;
}

/* One group of bf16 x widened to float32 (exactly), as quantize_group reads it. */
#if defined(HAVE_AVX2)
static inline void widen_group(const bf16 *narrow, float *wide) {
    for (int i = 0; i < QGROUP; i += 8) _mm256_storeu_ps(wide + i, from_bf16x8(narrow + i));
}
#else
static inline void widen_group(const bf16 *narrow, float *wide) {
    for (int i = 0; i < QGROUP; i++) wide[i] = from_bf16(narrow[i]);
}
#endif

void quantize_groups(const void *x, int x_is_bf16, int64_t m, int64_t cols, int halves,
                     int8_rows *q) {
    const int64_t groups = cols / QGROUP;
#pragma omp for schedule(static)
    for (int64_t at_group = 0; at_group < m * groups; at_group++) {
        const int64_t r = at_group / groups, g = at_group % groups, first = r * cols + g * QGROUP;
        float wide[QGROUP];
        const float *xg = (const float *)x + first;
        if (x_is_bf16) {
            widen_group((const bf16 *)x + first, wide);
            xg = wide;
        }
        const x_rows at = x_rows_at(q, r); /* row r's place (quantize.h) */
        const int64_t i = g * at.step;
        const group_code c = quantize_group(xg, at.codes + QGROUP * i);
        at.scales[i] = c.scale;
        at.sums[i] = c.scale * (float)c.sum;
        at.isums[i] = c.sum;
        if (halves) at.lows[i] = c.low;
    }
}

void free_int8_rows(int8_rows *q) {
    free(q->codes);
    free(q->scales);
    free(q->sums);
    free(q->isums);
    free(q->lows); /* NULL where not asked: free ignores it */
}
