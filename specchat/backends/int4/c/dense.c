/* Weights one row at a time against float32 x: float32 rows, int8 codes times their group's
 * scale (plus its zero, fused), or two 4-bit codes a byte times scale plus zero, not interleaved
 * (ggml's nibble order within each group of 32: byte j holds weight j low and weight j + 16
 * high). What the interleaved formats do not take: float tensors, Q5_1 and Q5_K (codes with
 * zeros), and any weight whose x is not rounded to 8 bits. */
#include "kernels.h"

enum { FLOAT_ROWS, SCALED_CODES, SCALED_CODES_WITH_ZEROS, NIBBLES_WITH_ZEROS };

typedef struct {
    const float *f32;
    const uint8_t *codes;
    const float *scales, *zeros;
    int group;
    int group_shift; /* log2(group / 16): 16-wide vector v's group is v >> group_shift */
} weight_row;

#define TILE 3 /* x rows per pass over a widened weight row: 12 accumulators in 16 registers */

static inline float weight_at(const weight_row *w, int kind, int64_t k) {
    const int64_t g = k >> (4 + w->group_shift);
    switch (kind) {
    case FLOAT_ROWS: return w->f32[k];
    case NIBBLES_WITH_ZEROS: {
        const int i = (int)(k % 32);
        const uint8_t byte = w->codes[16 * g + (i & 15)];
        return fmaf((float)(i < 16 ? byte & 15 : byte >> 4), w->scales[g], w->zeros[g]);
    }
    case SCALED_CODES_WITH_ZEROS: return fmaf((float)(int8_t)w->codes[k], w->scales[g], w->zeros[g]);
    default: return (float)(int8_t)w->codes[k] * w->scales[g];
    }
}

/* -- a weight row widened to float32, then TILE x rows at a time against it -------------------- */

#if defined(HAVE_AVX2)
/* widen_row 8 columns at a time for the code kinds (the same operations, so the same bits);
 * 0 for float rows, which need no widening. */
static int widen_row_vector(const weight_row *w, int kind, int64_t cols, float *wide) {
    if (kind == NIBBLES_WITH_ZEROS) {
        const __m128i low = _mm_set1_epi8(0x0f);
        for (int64_t g = 0; g < cols / 32; g++) {
            const __m128i raw = _mm_loadu_si128((const __m128i *)(w->codes + 16 * g));
            const __m128i lo = _mm_and_si128(raw, low), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
            const __m256 scale = _mm256_set1_ps(w->scales[g]), zero = _mm256_set1_ps(w->zeros[g]);
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int p = 0; p < 4; p++) {
                const __m256 code = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
                _mm256_storeu_ps(wide + 32 * g + 8 * p, _mm256_fmadd_ps(code, scale, zero));
            }
        }
        return 1;
    }
    if (kind == SCALED_CODES || kind == SCALED_CODES_WITH_ZEROS) {
        for (int64_t k = 0; k < cols; k += 8) {
            const int64_t g = k >> (4 + w->group_shift);
            const __m128i q = _mm_loadl_epi64((const __m128i *)(w->codes + k));
            const __m256 code = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
            const __m256 scale = _mm256_set1_ps(w->scales[g]);
            _mm256_storeu_ps(wide + k, kind == SCALED_CODES_WITH_ZEROS
                                           ? _mm256_fmadd_ps(code, scale, _mm256_set1_ps(w->zeros[g]))
                                           : _mm256_mul_ps(code, scale));
        }
        return 1;
    }
    return 0;
}

/* COUNT (<= TILE) x rows against one widened weight row, each in the same order: 8-float vector
 * v into accumulator v % 4, the four added pairwise, then the 8 lanes halved (4, 2, 1). */
static inline __attribute__((always_inline)) void dot_rows8(const float *x, const float *wide,
                                                            int64_t cols, int count,
                                                            float *results) {
    __m256 acc[TILE][4];
    for (int j = 0; j < count; j++)
        for (int a = 0; a < 4; a++) acc[j][a] = _mm256_setzero_ps();
    for (int64_t k = 0; k < cols; k += 32)
        for (int a = 0; a < 4; a++) {
            const __m256 wv = _mm256_loadu_ps(wide + k + 8 * a);
            for (int j = 0; j < count; j++)
                acc[j][a] = _mm256_fmadd_ps(_mm256_loadu_ps(x + j * cols + k + 8 * a), wv, acc[j][a]);
        }
    for (int j = 0; j < count; j++)
        results[j] = halving_sum8(_mm256_add_ps(_mm256_add_ps(acc[j][0], acc[j][1]),
                                                _mm256_add_ps(acc[j][2], acc[j][3])));
}
#else
static int widen_row_vector(const weight_row *w, int kind, int64_t cols, float *wide) {
    (void)w, (void)kind, (void)cols, (void)wide;
    return 0;
}

/* dot_rows8's order in plain C, one x row at a time. */
static void dot_rows8(const float *x, const float *wide, int64_t cols, int count, float *results) {
    for (int j = 0; j < count; j++) {
        const float *xr = x + j * cols;
        float acc[4][8] = {{0}};
        for (int64_t v = 0; v < cols / 8; v++)
            for (int l = 0; l < 8; l++)
                acc[v & 3][l] = fmaf(xr[8 * v + l], wide[8 * v + l], acc[v & 3][l]);
        float t[8], u[4];
        for (int l = 0; l < 8; l++) t[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
        for (int l = 0; l < 4; l++) u[l] = t[l] + t[l + 4];
        results[j] = (u[0] + u[2]) + (u[1] + u[3]);
    }
}
#endif

/* One weight row as float32 in `wide`: weight_at for every column. */
static const float *widen_row(const weight_row *w, int kind, int64_t cols, float *wide) {
    if (w->f32) return w->f32;
    if (!widen_row_vector(w, kind, cols, wide))
        for (int64_t k = 0; k < cols; k++) wide[k] = weight_at(w, kind, k);
    return wide;
}

/* Weight row n against every x row, through the widened row: out[r][n]. */
static void widened_row(const weight_row *w, int kind, const float *xf, int64_t m, int64_t cols,
                        void *out, int out_is_bf16, int64_t rows, int64_t n, float *wide) {
    const float *weights = widen_row(w, kind, cols, wide);
    float results[TILE];
    for (int64_t r = 0; r < m; r += TILE) {
        const int count = m - r >= TILE ? TILE : (int)(m - r);
        const float *xr = xf + r * cols;
        switch (count) { /* constant counts: sums stay in registers */
        case 3: dot_rows8(xr, weights, cols, 3, results); break;
        case 2: dot_rows8(xr, weights, cols, 2, results); break;
        default: dot_rows8(xr, weights, cols, 1, results); break;
        }
        for (int j = 0; j < count; j++) store_result(out, out_is_bf16, (r + j) * rows + n, results[j]);
    }
}

/* -- AVX-512: up to eight x rows against a weight row read 16 floats at a time -------------------- */

#if defined(__AVX512F__)
static inline __attribute__((always_inline)) __m512 weight_vector(const weight_row *w, int64_t v,
                                                                  int kind) {
    if (kind == FLOAT_ROWS) return _mm512_loadu_ps(w->f32 + 16 * v);
    const int64_t g = v >> w->group_shift;
    const __m128i q = _mm_loadu_si128((const __m128i *)(w->codes + 16 * v));
    const __m512 code = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    const __m512 scale = _mm512_set1_ps(w->scales[g]);
    return kind == SCALED_CODES_WITH_ZEROS
               ? _mm512_fmadd_ps(code, scale, _mm512_set1_ps(w->zeros[g]))
               : _mm512_mul_ps(code, scale);
}

/* COUNT (<= 8) outputs of one weight row: each a sum over 16-float vectors taken alternately
 * into two accumulators (even and odd vectors), added, then reduced across lanes. The same
 * instructions for every output, whichever COUNT it is computed in. */
static inline __attribute__((always_inline)) void dot_rows_avx512(
    const weight_row *w, const float *x, int64_t cols, int count, int kind, float *results) {
    __m512 even[8], odd[8];
    for (int j = 0; j < count; j++) even[j] = odd[j] = _mm512_setzero_ps();
    for (int64_t v = 0; v < cols / 16; v += 2) {
        const __m512 w0 = weight_vector(w, v, kind), w1 = weight_vector(w, v + 1, kind);
        for (int j = 0; j < count; j++) {
            even[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + j * cols + 16 * v), w0, even[j]);
            odd[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + j * cols + 16 * v + 16), w1, odd[j]);
        }
    }
    for (int j = 0; j < count; j++)
        results[j] = _mm512_reduce_add_ps(_mm512_add_ps(even[j], odd[j]));
}

/* dot_rows_avx512 with the count and the kind constants: sums stay in registers, no branch per
 * vector. */
static inline __attribute__((always_inline)) void dot_rows_counted(
    const weight_row *w, const float *x, int64_t cols, int count, int kind, float *results) {
    switch (count) {
    case 8: dot_rows_avx512(w, x, cols, 8, kind, results); break;
    case 7: dot_rows_avx512(w, x, cols, 7, kind, results); break;
    case 6: dot_rows_avx512(w, x, cols, 6, kind, results); break;
    case 5: dot_rows_avx512(w, x, cols, 5, kind, results); break;
    case 4: dot_rows_avx512(w, x, cols, 4, kind, results); break;
    case 3: dot_rows_avx512(w, x, cols, 3, kind, results); break;
    case 2: dot_rows_avx512(w, x, cols, 2, kind, results); break;
    default: dot_rows_avx512(w, x, cols, 1, kind, results); break;
    }
}

/* Weight row n against every x row: out[r][n]. 4-bit codes are widened first. */
static void dense_row(const weight_row *w, int kind, const float *xf, int64_t m, int64_t cols,
                      void *out, int out_is_bf16, int64_t rows, int64_t n, float *wide) {
    if (kind == NIBBLES_WITH_ZEROS) {
        widened_row(w, kind, xf, m, cols, out, out_is_bf16, rows, n, wide);
        return;
    }
    float results[8];
    for (int64_t r = 0; r < m; r += 8) {
        const int64_t left = m - r;
        const float *xr = xf + r * cols;
        const int count = left >= 8 ? 8 : (int)left;
        if (kind == FLOAT_ROWS)
            dot_rows_counted(w, xr, cols, count, FLOAT_ROWS, results);
        else if (kind == SCALED_CODES_WITH_ZEROS)
            dot_rows_counted(w, xr, cols, count, SCALED_CODES_WITH_ZEROS, results);
        else
            dot_rows_counted(w, xr, cols, count, SCALED_CODES, results);
        for (int j = 0; j < count; j++) store_result(out, out_is_bf16, (r + j) * rows + n, results[j]);
    }
}
#else
static void dense_row(const weight_row *w, int kind, const float *xf, int64_t m, int64_t cols,
                      void *out, int out_is_bf16, int64_t rows, int64_t n, float *wide) {
    widened_row(w, kind, xf, m, cols, out, out_is_bf16, rows, n, wide);
}
#endif

/* out[m][n] = sum_k x[m][k] * w[n][k], each weight row read once for all m rows; every output
 * is the same fixed-order sum whatever m is. */
void matmul_dense(const float *f32, const uint8_t *codes, const float *scales, const float *zeros,
                  int32_t group, int32_t code_bits, int64_t rows, int64_t cols, const float *xf,
                  int64_t m, void *out, int32_t out_is_bf16, int32_t threads) {
    const int64_t groups = group ? cols / group : 0;
    const int64_t row_bytes = code_bits == 4 ? cols / 2 : cols;
    const int kind = f32 ? FLOAT_ROWS
                         : code_bits == 4 ? NIBBLES_WITH_ZEROS
                                          : zeros ? SCALED_CODES_WITH_ZEROS : SCALED_CODES;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *wide = malloc(sizeof(float) * (size_t)cols);
#pragma omp for schedule(static)
        for (int64_t n = 0; n < rows; n++) {
            const weight_row w = {f32 ? f32 + n * cols : NULL, codes ? codes + n * row_bytes : NULL,
                                  scales ? scales + n * groups : NULL,
                                  zeros ? zeros + n * groups : NULL, group, group == 32 ? 1 : 0};
            dense_row(&w, kind, xf, m, cols, out, out_is_bf16, rows, n, wide);
        }
        free(wide);
    }
}
