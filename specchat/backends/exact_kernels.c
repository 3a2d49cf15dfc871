/* The int4 runtime's small kernels: RMSNorm, SwiGLU, RoPE and attention over a tree block.
 *
 * Each result row is computed by one fixed sequence of float operations that depends only on that
 * row's own inputs and on how many keys it sees: never on how many rows share the call, nor on
 * keys it does not see (attention loops over exactly the keys a row may attend to, so there are
 * no masked slots to add zeros for). A row of a block therefore equals, bit for bit, the same
 * token evaluated alone behind the same prefix. Reductions are written with explicit lanes so
 * the compiler can vectorise them without reordering anything.
 *
 * bf16 is stored as uint16_t (the upper half of a float32), rounded to nearest even as torch does.
 */
#include <math.h>
#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

typedef uint16_t bf16;

#define LANES 16
#define MAX_HEAD_DIM 256

static inline float from_bf16(bf16 value) {
    uint32_t bits = (uint32_t)value << 16;
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

static inline bf16 to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    return (bf16)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* exp(x) to about 1 ulp (Cephes' expf polynomial), branch-free so loops over it vectorise. */
static inline float exp_approx(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Sum of `count` floats in LANES interleaved partial sums, then halving: a fixed order. */
static inline float lane_sum(const float *values, int64_t count) {
    float acc[LANES] = {0};
    int64_t start = 0;
    for (; start + LANES <= count; start += LANES)
        for (int lane = 0; lane < LANES; lane++) acc[lane] += values[start + lane];
    for (int64_t i = start; i < count; i++) acc[i - start] += values[i];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int lane = 0; lane < width; lane++) acc[lane] += acc[lane + width];
    return acc[0];
}

static inline float dot(const float *a, const float *b, int dim) {
    float acc[LANES] = {0};
    for (int start = 0; start < dim; start += LANES)
        for (int lane = 0; lane < LANES; lane++) acc[lane] += a[start + lane] * b[start + lane];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int lane = 0; lane < width; lane++) acc[lane] += acc[lane + width];
    return acc[0];
}

/* x += delta (when given); out = x / rms(x) * weight, as llama.cpp's rms_norm then mul:
 * squares summed in double, the scale applied before the weight. out is bf16 or float32. */
void residual_rms_norm(float *x, const bf16 *delta, int64_t delta_stride, const float *weight,
                       void *out, int out_is_bf16, int64_t rows, int64_t dim, float eps) {
    for (int64_t row = 0; row < rows; row++) {
        float *xr = x + row * dim;
        if (delta) {
            const bf16 *dr = delta + row * delta_stride;
            for (int64_t i = 0; i < dim; i++) xr[i] += from_bf16(dr[i]);
        }
        double sum = 0.0;
        for (int64_t i = 0; i < dim; i++) sum += (double)(xr[i] * xr[i]);
        const float mean = (float)(sum / (double)dim);
        const float scale = 1.0f / __builtin_sqrtf(mean + eps);
        if (out_is_bf16) {
            bf16 *o = (bf16 *)out + row * dim;
            for (int64_t i = 0; i < dim; i++) o[i] = to_bf16((xr[i] * scale) * weight[i]);
        } else {
            float *o = (float *)out + row * dim;
            for (int64_t i = 0; i < dim; i++) o[i] = (xr[i] * scale) * weight[i];
        }
    }
}

/* out = silu(gate) * up, row by row (SwiGLU). */
void silu_mul(const bf16 *gate, const bf16 *up, int64_t stride, bf16 *out, int64_t rows,
              int64_t width) {
    for (int64_t row = 0; row < rows; row++) {
        const bf16 *g = gate + row * stride, *u = up + row * stride;
        bf16 *o = out + row * width;
        for (int64_t i = 0; i < width; i++) {
            const float gv = from_bf16(g[i]);
            o[i] = to_bf16(gv / (1.0f + exp_approx(-gv)) * from_bf16(u[i]));
        }
    }
}

/* Rotate adjacent pairs (x[2j], x[2j+1]) by position * theta_j, as llama.cpp's "normal" RoPE on
 * GGUF's permuted q/k weights. `cos_row`, `sin_row` hold one position's dim/2 values. */
static inline void rope(const bf16 *in, float *out, const float *cos_row, const float *sin_row,
                        int dim) {
    for (int j = 0; j < dim / 2; j++) {
        const float x0 = from_bf16(in[2 * j]), x1 = from_bf16(in[2 * j + 1]);
        out[2 * j] = x0 * cos_row[j] - x1 * sin_row[j];
        out[2 * j + 1] = x0 * sin_row[j] + x1 * cos_row[j];
    }
}

/* q . k for the key in `slot` of a transposed cache (keys[d * slots + slot]): one fused
 * multiply-add per dimension, in order. */
static inline float key_score(const float *q, const float *keys, int64_t slots, int dim,
                              int64_t slot) {
    float s = 0.0f;
    for (int d = 0; d < dim; d++) s = fmaf(q[d], keys[d * slots + slot], s);
    return s;
}

/* key_score for slots 0..count-1, LANES keys at a time (each lane the same fused multiply-adds
 * in the same order as key_score, so a key's score is the same in a lane or alone). */
static void contiguous_scores(const float *q, const float *keys, int64_t slots, int dim,
                              int64_t count, float scale, float *out) {
    int64_t start = 0;
#if defined(__AVX512F__)
    /* four groups of 16 keys at once: independent chains keep the FMA units busy */
    const __m512 scale_v = _mm512_set1_ps(scale);
    for (; start + 64 <= count; start += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < dim; d++) {
            const __m512 qd = _mm512_set1_ps(q[d]);
            const float *kd = keys + d * slots + start;
            a0 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kd), a0);
            a1 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kd + 16), a1);
            a2 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kd + 32), a2);
            a3 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kd + 48), a3);
        }
        _mm512_storeu_ps(out + start, _mm512_mul_ps(a0, scale_v));
        _mm512_storeu_ps(out + start + 16, _mm512_mul_ps(a1, scale_v));
        _mm512_storeu_ps(out + start + 32, _mm512_mul_ps(a2, scale_v));
        _mm512_storeu_ps(out + start + 48, _mm512_mul_ps(a3, scale_v));
    }
    for (; start + 16 <= count; start += 16) {
        __m512 a0 = _mm512_setzero_ps();
        for (int d = 0; d < dim; d++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(keys + d * slots + start), a0);
        _mm512_storeu_ps(out + start, _mm512_mul_ps(a0, scale_v));
    }
    if (start < count) { /* the last keys, in masked lanes: the same arithmetic per lane */
        const __mmask16 mask = (__mmask16)((1u << (count - start)) - 1u);
        __m512 a0 = _mm512_setzero_ps();
        for (int d = 0; d < dim; d++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]),
                                 _mm512_maskz_loadu_ps(mask, keys + d * slots + start), a0);
        _mm512_mask_storeu_ps(out + start, mask, _mm512_mul_ps(a0, scale_v));
        start = count;
    }
#endif
    for (; start + LANES <= count; start += LANES) {
        float acc[LANES] = {0};
        for (int d = 0; d < dim; d++) {
            const float qd = q[d];
            const float *kd = keys + d * slots + start;
            for (int lane = 0; lane < LANES; lane++) acc[lane] = fmaf(qd, kd[lane], acc[lane]);
        }
        for (int lane = 0; lane < LANES; lane++) out[start + lane] = acc[lane] * scale;
    }
    for (int64_t t = start; t < count; t++) out[t] = key_score(q, keys, slots, dim, t) * scale;
}

/* acc = sum over keys t of weights[t] * value(t), values in bf16 rows [slots, dim]; key t is
 * slot t for the prefix, else block row mine[t - n_prefix]. Each dimension accumulates over the
 * keys in order. */
static inline __attribute__((always_inline)) void weighted_values(
    const float *weights, int64_t count, int64_t n_prefix, const int32_t *mine,
    const bf16 *values, int dim, float *acc) {
#if defined(__AVX512F__)
    if (dim <= 128) {
        __m512 sum[8];
        for (int c = 0; c < dim / 16; c++) sum[c] = _mm512_setzero_ps();
        for (int64_t t = 0; t < count; t++) {
            const int64_t slot = t < n_prefix ? t : n_prefix + mine[t - n_prefix];
            const __m512 w = _mm512_set1_ps(weights[t]);
            const bf16 *row = values + slot * dim;
            for (int c = 0; c < dim / 16; c++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(row + 16 * c));
                const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
                sum[c] = _mm512_fmadd_ps(w, v, sum[c]);
            }
        }
        for (int c = 0; c < dim / 16; c++) _mm512_storeu_ps(acc + 16 * c, sum[c]);
        return;
    }
#endif
    for (int d = 0; d < dim; d++) acc[d] = 0.0f;
    for (int64_t t = 0; t < count; t++) {
        const int64_t slot = t < n_prefix ? t : n_prefix + mine[t - n_prefix];
        const float w = weights[t];
        const bf16 *row = values + slot * dim;
        for (int d = 0; d < dim; d++) acc[d] = fmaf(w, from_bf16(row[d]), acc[d]);
    }
}

/* One layer's attention for a block of `rows` tokens behind `n_prefix` cached ones.
 *
 * q/k/v: bf16 rows (each with its stride) straight from the projections. Row i's k and v go to
 * cache slot n_prefix + i (k after RoPE, as float32, in a transposed cache [kv_heads, head_dim,
 * slots] so that scores vectorise over keys; v as bf16 in [kv_heads, slots, head_dim]). Row i
 * then attends to the prefix and to the block rows listed in seen[i * seen_stride ...] (n_seen[i]
 * of them: its ancestors in depth order, then itself), so keys come in the order a chain evaluated
 * alone would have them. out: bf16 [rows, heads * head_dim]. */
void attention(const bf16 *q, int64_t q_stride, const bf16 *k, int64_t k_stride, const bf16 *v,
               int64_t v_stride, const float *cos_table, const float *sin_table,
               const int32_t *positions, float *k_cache, bf16 *v_cache, int64_t slots,
               int32_t n_prefix, int32_t rows, const int32_t *seen, int32_t seen_stride,
               const int32_t *n_seen, bf16 *out, int32_t heads, int32_t kv_heads,
               int32_t head_dim, float scale, int32_t threads) {
    const int half = head_dim / 2;
    float *q_rot = malloc(sizeof(float) * (size_t)rows * heads * head_dim);
    float rotated[MAX_HEAD_DIM];
    for (int32_t i = 0; i < rows; i++) {
        const float *cos_row = cos_table + (int64_t)positions[i] * half;
        const float *sin_row = sin_table + (int64_t)positions[i] * half;
        const int64_t slot = (int64_t)n_prefix + i;
        for (int32_t h = 0; h < heads; h++)
            rope(q + i * q_stride + h * head_dim, q_rot + ((int64_t)i * heads + h) * head_dim,
                 cos_row, sin_row, head_dim);
        for (int32_t g = 0; g < kv_heads; g++) {
            rope(k + i * k_stride + g * head_dim, rotated, cos_row, sin_row, head_dim);
            float *keys = k_cache + (int64_t)g * head_dim * slots;
            for (int d = 0; d < head_dim; d++) keys[d * slots + slot] = rotated[d];
            memcpy(v_cache + ((int64_t)g * slots + slot) * head_dim, v + i * v_stride + g * head_dim,
                   sizeof(bf16) * head_dim);
        }
    }
    const int32_t group = heads / kv_heads;
    const int64_t tasks = (int64_t)rows * heads;
    int32_t most_seen = 0;
    for (int32_t i = 0; i < rows; i++) most_seen = n_seen[i] > most_seen ? n_seen[i] : most_seen;
    const int64_t most_keys = (int64_t)n_prefix + most_seen;
#pragma omp parallel num_threads(threads) if (tasks >= 32 && threads > 1)
    {
        float *weights = malloc(sizeof(float) * (size_t)(most_keys + LANES));
        float acc[MAX_HEAD_DIM];
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            const int32_t i = (int32_t)(task / heads), h = (int32_t)(task % heads);
            const int32_t g = h / group;
            const float *qh = q_rot + task * head_dim;
            const float *keys = k_cache + (int64_t)g * head_dim * slots;
            const bf16 *values = v_cache + (int64_t)g * slots * head_dim;
            const int32_t *mine = seen + (int64_t)i * seen_stride;
            const int64_t count = (int64_t)n_prefix + n_seen[i];
            /* the keys that sit in consecutive slots from 0: the prefix, and the block rows of a
             * leading chain; the others (a tree's ancestors) are gathered one by one */
            int32_t run = 0;
            while (run < n_seen[i] && mine[run] == run) run++;
            contiguous_scores(qh, keys, slots, head_dim, (int64_t)n_prefix + run, scale, weights);
            for (int64_t t = (int64_t)n_prefix + run; t < count; t++)
                weights[t] = key_score(qh, keys, slots, head_dim, n_prefix + mine[t - n_prefix]) * scale;
            float top = -3.0e38f;
            for (int64_t t = 0; t < count; t++) top = weights[t] > top ? weights[t] : top;
            for (int64_t t = 0; t < count; t++) weights[t] = exp_approx(weights[t] - top);
            const float inverse = 1.0f / lane_sum(weights, count);
            for (int64_t t = 0; t < count; t++) weights[t] *= inverse;
            switch (head_dim) { /* constant sizes let the accumulators live in registers */
            case 64: weighted_values(weights, count, n_prefix, mine, values, 64, acc); break;
            case 128: weighted_values(weights, count, n_prefix, mine, values, 128, acc); break;
            default: weighted_values(weights, count, n_prefix, mine, values, head_dim, acc); break;
            }
            bf16 *o = out + (int64_t)i * heads * head_dim + (int64_t)h * head_dim;
            for (int d = 0; d < head_dim; d++) o[d] = to_bf16(acc[d]);
        }
        free(weights);
    }
    free(q_rot);
}

/* float16 bits to float32 (normal, subnormal and zero; a weight scale is never inf or NaN). */
static inline float from_half(uint16_t half) {
    const uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
    uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu, bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exponent = 113;
            while (!(mantissa & 0x400u)) {
                mantissa <<= 1;
                exponent--;
            }
            bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* Rows of x as float32: `x` itself, or bf16 rows widened into `scratch` (exactly). */
static const float *float_rows(const void *x, int x_is_bf16, int64_t m, int64_t cols,
                               float **scratch) {
    if (!x_is_bf16) return (const float *)x;
    float *wide = malloc(sizeof(float) * (size_t)(m * cols));
    const bf16 *narrow = (const bf16 *)x;
    for (int64_t i = 0; i < m * cols; i++) wide[i] = from_bf16(narrow[i]);
    *scratch = wide;
    return wide;
}

static inline void store_result(void *out, int out_is_bf16, int64_t index, float value) {
    if (out_is_bf16)
        ((bf16 *)out)[index] = to_bf16(value);
    else
        ((float *)out)[index] = value;
}

/* One weight row's 16 weights at vector v: float32 rows, or int8 codes times their group's
 * scale (plus zero, fused). */
typedef struct {
    const float *f32;
    const int8_t *codes;
    const float *scales, *zeros;
    int group;
    int group_shift; /* log2(group / 16): vector v's group is v >> group_shift */
} weight_row;

static inline float weight_at(const weight_row *w, int64_t k) {
    if (w->f32) return w->f32[k];
    const float code = (float)w->codes[k], scale = w->scales[k / w->group];
    return w->zeros ? fmaf(code, scale, w->zeros[k / w->group]) : code * scale;
}

#if defined(__AVX512F__)
enum { FLOAT_ROWS, SCALED_CODES, SCALED_CODES_WITH_ZEROS };

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
#endif

/* out[m][n] = sum_k x[m][k] * w[n][k] (cols a multiple of 32), for the weights the int4 kernel
 * cannot carry: float32 rows (`f32`), or int8 codes with a float32 scale (and zero) per `group`
 * weights, the exact form of Q8_0, Q5_x and Q6_K blocks. Each weight row is read once for all m
 * rows; every output is the same fixed-order float32 sum whatever m is. x and out are bf16 or
 * float32. */
void matmul_rows(const float *f32, const int8_t *codes, const float *scales, const float *zeros,
                 int32_t group, int64_t rows, int64_t cols, const void *x, int32_t x_is_bf16,
                 int64_t m, void *out, int32_t out_is_bf16, int32_t threads) {
    float *scratch = NULL;
    const float *xf = float_rows(x, x_is_bf16, m, cols, &scratch);
    const int64_t groups = group ? cols / group : 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *wide = malloc(sizeof(float) * (size_t)cols);
        float results[8];
        (void)results;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < rows; n++) {
            weight_row w = {f32 ? f32 + n * cols : NULL, codes ? codes + n * cols : NULL,
                            scales ? scales + n * groups : NULL, zeros ? zeros + n * groups : NULL,
                            group, group == 32 ? 1 : 0};
#if defined(__AVX512F__)
            (void)wide;
            for (int64_t r = 0; r < m; r += 8) {
                const int64_t left = m - r;
                const float *xr = xf + r * cols;
                /* constant counts and kinds: sums stay in registers, no branch per vector */
                const int count = left >= 8 ? 8 : (int)left;
#define DOT_ROWS(KIND)                                                                       \
    switch (count) {                                                                         \
    case 8: dot_rows_avx512(&w, xr, cols, 8, KIND, results); break;                          \
    case 7: dot_rows_avx512(&w, xr, cols, 7, KIND, results); break;                          \
    case 6: dot_rows_avx512(&w, xr, cols, 6, KIND, results); break;                          \
    case 5: dot_rows_avx512(&w, xr, cols, 5, KIND, results); break;                          \
    case 4: dot_rows_avx512(&w, xr, cols, 4, KIND, results); break;                          \
    case 3: dot_rows_avx512(&w, xr, cols, 3, KIND, results); break;                          \
    case 2: dot_rows_avx512(&w, xr, cols, 2, KIND, results); break;                          \
    default: dot_rows_avx512(&w, xr, cols, 1, KIND, results); break;                         \
    }
                if (f32) {
                    DOT_ROWS(FLOAT_ROWS)
                } else if (zeros) {
                    DOT_ROWS(SCALED_CODES_WITH_ZEROS)
                } else {
                    DOT_ROWS(SCALED_CODES)
                }
#undef DOT_ROWS
                for (int j = 0; j < 8 && j < left; j++)
                    store_result(out, out_is_bf16, (r + j) * rows + n, results[j]);
            }
#else
            for (int64_t k = 0; k < cols; k++) wide[k] = weight_at(&w, k);
            for (int64_t r = 0; r < m; r++)
                store_result(out, out_is_bf16, r * rows + n, dot(xf + r * cols, wide, (int)cols));
#endif
        }
        free(wide);
    }
    free(scratch);
}
