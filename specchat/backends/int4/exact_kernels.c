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
#if defined(__AVX2__) && defined(__FMA__) /* x86-64-v3; every AVX-512 build has them too */
#include <immintrin.h>
#define HAVE_AVX2 1
#if defined(__AVX512F__) && defined(__AVX512VNNI__) /* Ice Lake, Zen 4 and later */
#define HAVE_VNNI512 1
#endif
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

#if defined(HAVE_AVX2)
/* The helpers above on 8 floats at once, by the same operations (so the same bits). */
static inline __m256 from_bf16x8(const bf16 *values) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)values);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

static inline void to_bf16x8(__m256 values, bf16 *out) {
    const __m256i bits = _mm256_castps_si256(values);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i halves = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), 0x08);
    _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(packed));
}

static inline __m256 exp_approx8(__m256 x) {
    /* min/max with x second: a NaN passes through, as in the scalar comparisons */
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), _mm256_min_ps(_mm256_set1_ps(88.0f), x));
    const __m256 shifter = _mm256_set1_ps(12582912.0f);
    const __m256 n = _mm256_sub_ps(
        _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), shifter), shifter);
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
    r = _mm256_add_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(2.12194440e-4f)));
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
#endif

/* Sum of `count` floats in LANES interleaved partial sums, then halving: a fixed order. */
static inline float lane_sum(const float *values, int64_t count) {
    float acc[LANES] = {0};
    int64_t start = 0;
#if defined(HAVE_AVX2)
    __m256 low = _mm256_setzero_ps(), high = low;
    for (; start + LANES <= count; start += LANES) {
        low = _mm256_add_ps(low, _mm256_loadu_ps(values + start));
        high = _mm256_add_ps(high, _mm256_loadu_ps(values + start + 8));
    }
    _mm256_storeu_ps(acc, low);
    _mm256_storeu_ps(acc + 8, high);
#endif
    for (; start + LANES <= count; start += LANES)
        for (int lane = 0; lane < LANES; lane++) acc[lane] += values[start + lane];
    for (int64_t i = start; i < count; i++) acc[i - start] += values[i];
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
        int64_t i = 0;
#if defined(HAVE_AVX2)
        for (; i + 8 <= width; i += 8) {
            const __m256 gv = from_bf16x8(g + i);
            const __m256 e = exp_approx8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
            const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
            to_bf16x8(_mm256_mul_ps(silu, from_bf16x8(u + i)), o + i);
        }
#endif
        for (; i < width; i++) {
            const float gv = from_bf16(g[i]);
            o[i] = to_bf16(gv / (1.0f + exp_approx(-gv)) * from_bf16(u[i]));
        }
    }
}

/* What a family does to a head's q or k between the projection and the cache: a bias (qwen2), an
 * RMS norm over the head (qwen3), and which pairs RoPE rotates. NULL pointers: none of it. */
typedef struct {
    const float *bias; /* [q | k | v] widths, or NULL */
    const float *q_norm, *k_norm; /* [head_dim] each, or NULL */
    float eps;
    int32_t neox; /* rotate (x[j], x[j + dim/2]) instead of (x[2j], x[2j+1]) */
} head_ops;

/* One head's bf16 projection as float32, its bias added and its RMS norm applied (as llama.cpp's
 * rms_norm then mul: squares summed in double, the scale applied before the weight). */
static inline void head_in(const bf16 *in, const float *bias, const float *norm, float eps,
                           float *out, int dim) {
    for (int d = 0; d < dim; d++) out[d] = bias ? from_bf16(in[d]) + bias[d] : from_bf16(in[d]);
    if (norm) {
        double sum = 0.0;
        for (int d = 0; d < dim; d++) sum += (double)(out[d] * out[d]);
        const float scale = 1.0f / __builtin_sqrtf((float)(sum / (double)dim) + eps);
        for (int d = 0; d < dim; d++) out[d] = (out[d] * scale) * norm[d];
    }
}

/* Rotate pairs by position * theta_j in place: adjacent pairs (x[2j], x[2j+1]) as llama.cpp's
 * "normal" RoPE on GGUF's permuted Llama q/k weights, or (x[j], x[j + dim/2]) as its NEOX RoPE
 * (qwen2, qwen3, phi3). `cos_row`, `sin_row` hold one position's dim/2 values. */
static inline void rope(float *x, const float *cos_row, const float *sin_row, int dim, int neox) {
    const int half = dim / 2;
    for (int j = 0; j < half; j++) {
        const int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos_row[j] - x1 * sin_row[j];
        x[b] = x0 * sin_row[j] + x1 * cos_row[j];
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
#elif defined(HAVE_AVX2)
    /* four groups of 8 keys at once, as above with half the lanes */
    const __m256 scale_v = _mm256_set1_ps(scale);
    for (; start + 32 <= count; start += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < dim; d++) {
            const __m256 qd = _mm256_set1_ps(q[d]);
            const float *kd = keys + d * slots + start;
            a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kd), a0);
            a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kd + 8), a1);
            a2 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kd + 16), a2);
            a3 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kd + 24), a3);
        }
        _mm256_storeu_ps(out + start, _mm256_mul_ps(a0, scale_v));
        _mm256_storeu_ps(out + start + 8, _mm256_mul_ps(a1, scale_v));
        _mm256_storeu_ps(out + start + 16, _mm256_mul_ps(a2, scale_v));
        _mm256_storeu_ps(out + start + 24, _mm256_mul_ps(a3, scale_v));
    }
    for (; start + 8 <= count; start += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (int d = 0; d < dim; d++)
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[d]), _mm256_loadu_ps(keys + d * slots + start), a0);
        _mm256_storeu_ps(out + start, _mm256_mul_ps(a0, scale_v));
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
#elif defined(HAVE_AVX2)
    if (dim % 8 == 0) { /* 64 dimensions at a time: eight sums in registers */
        for (int first = 0; first < dim; first += 64) {
            const int vectors = (dim - first >= 64 ? 64 : dim - first) / 8;
            __m256 sum[8];
            for (int c = 0; c < vectors; c++) sum[c] = _mm256_setzero_ps();
            for (int64_t t = 0; t < count; t++) {
                const int64_t slot = t < n_prefix ? t : n_prefix + mine[t - n_prefix];
                const __m256 w = _mm256_set1_ps(weights[t]);
                const bf16 *row = values + slot * dim + first;
                for (int c = 0; c < vectors; c++) {
                    const __m128i raw = _mm_loadu_si128((const __m128i *)(row + 8 * c));
                    const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
                    sum[c] = _mm256_fmadd_ps(w, v, sum[c]);
                }
            }
            for (int c = 0; c < vectors; c++) _mm256_storeu_ps(acc + first + 8 * c, sum[c]);
        }
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

/* weights = exp(weights - max) / their lane_sum, in place. */
static inline void softmax(float *weights, int64_t count) {
    float top = -3.0e38f;
    int64_t t = 0;
#if defined(HAVE_AVX2)
    __m256 tops = _mm256_set1_ps(top);
    for (; t + 8 <= count; t += 8) tops = _mm256_max_ps(_mm256_loadu_ps(weights + t), tops);
    float lanes[8];
    _mm256_storeu_ps(lanes, tops);
    for (int l = 0; l < 8; l++) top = lanes[l] > top ? lanes[l] : top; /* max: any order */
#endif
    for (; t < count; t++) top = weights[t] > top ? weights[t] : top;
    t = 0;
#if defined(HAVE_AVX2)
    for (; t + 8 <= count; t += 8)
        _mm256_storeu_ps(weights + t,
                         exp_approx8(_mm256_sub_ps(_mm256_loadu_ps(weights + t), _mm256_set1_ps(top))));
#endif
    for (; t < count; t++) weights[t] = exp_approx(weights[t] - top);
    const float inverse = 1.0f / lane_sum(weights, count);
    for (t = 0; t < count; t++) weights[t] *= inverse;
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
               int32_t head_dim, float scale, const head_ops *ops, int32_t threads) {
    const int half = head_dim / 2;
    const int64_t q_width = (int64_t)heads * head_dim, kv_width = (int64_t)kv_heads * head_dim;
    const float *q_bias = ops->bias, *k_bias = ops->bias ? ops->bias + q_width : NULL;
    const float *v_bias = ops->bias ? ops->bias + q_width + kv_width : NULL;
    float *q_rot = malloc(sizeof(float) * (size_t)rows * heads * head_dim);
    float rotated[MAX_HEAD_DIM];
    for (int32_t i = 0; i < rows; i++) {
        const float *cos_row = cos_table + (int64_t)positions[i] * half;
        const float *sin_row = sin_table + (int64_t)positions[i] * half;
        const int64_t slot = (int64_t)n_prefix + i;
        for (int32_t h = 0; h < heads; h++) {
            float *qh = q_rot + ((int64_t)i * heads + h) * head_dim;
            head_in(q + i * q_stride + h * head_dim, q_bias ? q_bias + h * head_dim : NULL,
                    ops->q_norm, ops->eps, qh, head_dim);
            rope(qh, cos_row, sin_row, head_dim, ops->neox);
        }
        for (int32_t g = 0; g < kv_heads; g++) {
            head_in(k + i * k_stride + g * head_dim, k_bias ? k_bias + g * head_dim : NULL,
                    ops->k_norm, ops->eps, rotated, head_dim);
            rope(rotated, cos_row, sin_row, head_dim, ops->neox);
            float *keys = k_cache + (int64_t)g * head_dim * slots;
            for (int d = 0; d < head_dim; d++) keys[d * slots + slot] = rotated[d];
            bf16 *values = v_cache + ((int64_t)g * slots + slot) * head_dim;
            const bf16 *vg = v + i * v_stride + g * head_dim;
            if (v_bias) {
                for (int d = 0; d < head_dim; d++)
                    values[d] = to_bf16(from_bf16(vg[d]) + v_bias[g * head_dim + d]);
            } else {
                memcpy(values, vg, sizeof(bf16) * head_dim);
            }
        }
    }
    const int32_t group = heads / kv_heads;
    const int64_t tasks = (int64_t)rows * heads;
    int32_t most_seen = 0;
    for (int32_t i = 0; i < rows; i++) most_seen = n_seen[i] > most_seen ? n_seen[i] : most_seen;
    const int64_t most_keys = (int64_t)n_prefix + most_seen;
#pragma omp parallel num_threads(threads) if (tasks > 1 && threads > 1)
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
            softmax(weights, count);
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
    int64_t i = 0;
#if defined(HAVE_AVX2)
    for (; i + 8 <= m * cols; i += 8) _mm256_storeu_ps(wide + i, from_bf16x8(narrow + i));
#endif
    for (; i < m * cols; i++) wide[i] = from_bf16(narrow[i]);
    *scratch = wide;
    return wide;
}

static inline void store_result(void *out, int out_is_bf16, int64_t index, float value) {
    if (out_is_bf16)
        ((bf16 *)out)[index] = to_bf16(value);
    else
        ((float *)out)[index] = value;
}

/* What a call's weight rows are: float32, int8 codes times their group's scale (plus its zero,
 * fused), or two 4-bit codes a byte times scale plus zero (ggml's nibble order within each group
 * of 32: byte j holds weight j low and weight j + 16 high). */
enum { FLOAT_ROWS, SCALED_CODES, SCALED_CODES_WITH_ZEROS, NIBBLES_WITH_ZEROS };

typedef struct {
    const float *f32;
    const uint8_t *codes;
    const float *scales, *zeros;
    int group;
    int group_shift; /* log2(group / 16): 16-wide vector v's group is v >> group_shift */
} weight_row;

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
#endif

/* One weight row as float32 in `wide`: weight_at for every column, vectorized where the CPU
 * can (the same operations, so the same bits). */
static void widen_row(const weight_row *w, int kind, int64_t cols, float *wide) {
#if defined(HAVE_AVX2)
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
        return;
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
        return;
    }
#endif
    for (int64_t k = 0; k < cols; k++) wide[k] = weight_at(w, kind, k);
}

#define TILE 3 /* x rows per pass over a widened weight row: 12 accumulators in 16 registers */

/* COUNT (<= TILE) x rows against one widened weight row, each in the same order: 8-float vector
 * v into accumulator v % 4, the four added pairwise, then the 8 lanes halved (4, 2, 1). */
static inline __attribute__((always_inline)) void dot_rows8(const float *x, const float *wide,
                                                            int64_t cols, int count,
                                                            float *results) {
#if defined(HAVE_AVX2)
    __m256 acc[TILE][4];
    for (int j = 0; j < count; j++)
        for (int a = 0; a < 4; a++) acc[j][a] = _mm256_setzero_ps();
    for (int64_t k = 0; k < cols; k += 32)
        for (int a = 0; a < 4; a++) {
            const __m256 wv = _mm256_loadu_ps(wide + k + 8 * a);
            for (int j = 0; j < count; j++)
                acc[j][a] = _mm256_fmadd_ps(_mm256_loadu_ps(x + j * cols + k + 8 * a), wv, acc[j][a]);
        }
    for (int j = 0; j < count; j++) {
        const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[j][0], acc[j][1]),
                                       _mm256_add_ps(acc[j][2], acc[j][3]));
        const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        const __m128 h = _mm_add_ps(u, _mm_movehl_ps(u, u));
        results[j] = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
    }
#else
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
#endif
}

/* -- 8-bit activations -------------------------------------------------------------------------
 *
 * Below AVX-512 a weight is cheapest multiplied as llama.cpp does it: each x row rounded to int8
 * per group of 32 with one scale (scale = max |x| / 127), and each group's dot product summed in
 * integers (maddubs: 32 byte products in one instruction, exact and in any order), then scaled.
 * For int8 codes (Q8_0, Q5_0), per output in this fixed order: 8 integer lanes per group (lane
 * l: bytes 4l..4l+3), converted and multiplied into accumulator g % 2 by weight scale * x scale
 * (one float product); then the lanes summed by halving. 4-bit weights: below. */

#define QGROUP 32

typedef struct {
    int8_t *codes;  /* [m][cols] */
    float *scales;  /* [m][padded]: the x scale per group */
    float *sums;    /* [m][padded]: x scale * the group's integer sum */
    int32_t *isums; /* [m][padded]: the group's integer sum */
    int32_t *lows;  /* [m][padded]: the integer sum of the group's first 16 codes, where asked */
    int64_t padded; /* groups rounded up to a multiple of 8 (zeros beyond) */
} int8_rows;

/* `halves`: also each group's first-half sum (int8 weights in groups of 16 need it). */
static void quantize_rows(const float *x, int64_t m, int64_t cols, int halves, int8_rows *q) {
    const int64_t groups = cols / QGROUP;
    q->padded = (groups + 7) / 8 * 8;
    q->codes = malloc((size_t)(m * cols));
    q->scales = calloc((size_t)(m * q->padded), sizeof(float));
    q->sums = calloc((size_t)(m * q->padded), sizeof(float));
    q->isums = calloc((size_t)(m * q->padded), sizeof(int32_t));
    q->lows = halves ? calloc((size_t)(m * q->padded), sizeof(int32_t)) : NULL;
    for (int64_t r = 0; r < m; r++)
        for (int64_t g = 0; g < groups; g++) {
            const float *xg = x + r * cols + g * QGROUP;
            int8_t *cg = q->codes + r * cols + g * QGROUP;
#if defined(HAVE_AVX2)
            { /* the loops below, 8 at a time: max and integer sums are order-free, and
               * cvtps rounds to nearest even as nearbyintf does */
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
                __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(total),
                                            _mm256_extracti128_si256(total, 1));
                sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
                sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
                if (halves) {
                    const __m256i first = _mm256_add_epi32(codes[0], codes[1]);
                    __m128i low = _mm_add_epi32(_mm256_castsi256_si128(first),
                                                _mm256_extracti128_si256(first, 1));
                    low = _mm_add_epi32(low, _mm_shuffle_epi32(low, 0x4e));
                    low = _mm_add_epi32(low, _mm_shuffle_epi32(low, 0xb1));
                    q->lows[r * q->padded + g] = _mm_cvtsi128_si32(low);
                }
                q->scales[r * q->padded + g] = scale;
                q->isums[r * q->padded + g] = _mm_cvtsi128_si32(sum);
                q->sums[r * q->padded + g] = scale * (float)_mm_cvtsi128_si32(sum);
                continue;
            }
#endif
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
            if (halves) q->lows[r * q->padded + g] = low;
            q->scales[r * q->padded + g] = scale;
            q->isums[r * q->padded + g] = sum;
            q->sums[r * q->padded + g] = scale * (float)sum;
        }
}

static void free_int8_rows(int8_rows *q) {
    free(q->codes);
    free(q->scales);
    free(q->sums);
    free(q->isums);
    free(q->lows); /* NULL where not asked: free ignores it */
}

/* -- 4-bit weights, eight rows interleaved ---------------------------------------------------
 *
 * The same weights as NIBBLES_WITH_ZEROS, laid out (once, at load) so that one 32-byte vector
 * holds four consecutive weights of eight rows: the eight rows' sums then sit in the eight lanes
 * of one register, and a group of 32 weights costs eight maddubs for all of them, no horizontal
 * sum and one scale multiply (llama.cpp's repacked layout does the same for prompts). For a
 * block of 8 rows and group g, chunk c (0..3) is 32 bytes: byte 4j + b holds row j's weight
 * 8c + b in its low nibble and 8c + 4 + b in its high one. Scales and zeros: [block][group][8].
 *
 * Per row and group the integer sum of 32 products is exact whatever the order (under 2^16, so
 * int16 lanes hold eight maddubs without saturating), then row j, token t:
 *   acc = fma((float)isum, scale * x_scale, acc), group by group; zacc = fma(zero, x_sum, zacc);
 *   result = acc + zacc.
 * A fixed sequence per row and token, so a block of tokens gives each the bits it gets alone,
 * and the plain C below gives the AVX2 path's bits. */

#define ROWS8 8

/* Scales and zeros are float16 where the file's are exactly that (Q4_0, Q4_1: a fifth fewer bytes
 * to read a token), float32 otherwise (Q4_K's products of two scales); the same values either way.
 * Q4_0's zeros are -8 * scale, exact in float, so they are not stored at all (zeros NULL). */
static inline float lane_value(const void *values, int64_t at, int half) {
    return half ? from_half(((const uint16_t *)values)[at]) : ((const float *)values)[at];
}
static inline float zero_value(const void *zeros, const void *scales, int64_t at, int half) {
    return zeros ? lane_value(zeros, at, half) : -8.0f * lane_value(scales, at, half);
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

/* The 4-bit tiles' last step: each token's zero terms (zero * x's group sum, group by group)
 * added to its sums. */
static inline __attribute__((always_inline)) void add_zero_terms(
    const void *zeros, const void *scales, int half, const int8_rows *q, int64_t r0,
    int64_t groups, int count, const __m256 *acc, __m256 *results) {
    __m256 zacc[4];
    for (int j = 0; j < count; j++) zacc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        const __m256 zero = zeros8(zeros, scales, g * ROWS8, half);
        for (int j = 0; j < count; j++)
            zacc[j] = _mm256_fmadd_ps(
                zero, _mm256_broadcast_ss(q->sums + (r0 + j) * q->padded + g), zacc[j]);
    }
    for (int j = 0; j < count; j++) results[j] = _mm256_add_ps(acc[j], zacc[j]);
}
#endif

#if defined(HAVE_AVX2)
/* Tokens r0 .. r0 + COUNT - 1 against one block of eight rows: their eight sums each. */
static inline __attribute__((always_inline)) void nibbles8_tile(
    const uint8_t *codes, const void *scales, const void *zeros, int half, const int8_rows *q,
    int64_t r0, int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP;
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int j = 0; j < count; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i s16[4];
        for (int j = 0; j < count; j++) s16[j] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(codes + (g * 4 + c) * 32));
            const __m256i lo = _mm256_and_si256(raw, low);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            for (int j = 0; j < count; j++) {
                const int8_t *x = q->codes + (r0 + j) * cols + QGROUP * g + 8 * c;
                int32_t first, second;
                memcpy(&first, x, 4);
                memcpy(&second, x + 4, 4);
                const __m256i pair = _mm256_add_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_set1_epi32(first)),
                    _mm256_maddubs_epi16(hi, _mm256_set1_epi32(second)));
                s16[j] = _mm256_add_epi16(s16[j], pair);
            }
        }
        const __m256 scale = lanes8(scales, g * ROWS8, half);
        for (int j = 0; j < count; j++)
            acc[j] = add_group(acc[j], _mm256_madd_epi16(s16[j], ones), scale, q, r0 + j, g);
    }
    add_zero_terms(zeros, scales, half, q, r0, groups, count, acc, results);
}
#endif

#if defined(HAVE_VNNI512)
/* nibbles8_tile with AVX-512 VNNI: one 64-byte load holds chunks c and c + 1 (lanes 0-7 and 8-15
 * the eight rows of each) and vpdpbusd multiplies and sums four byte pairs a lane, so a group
 * costs four instructions a token where AVX2 spends eight maddubs and their additions. The
 * integer sums are the same exact integers, so every float that follows, and the result, has
 * the AVX2 path's bits. */
static inline __attribute__((always_inline)) void nibbles8_tile_vnni(
    const uint8_t *codes, const void *scales, const void *zeros, int half, const int8_rows *q,
    int64_t r0, int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP;
    const __m512i low = _mm512_set1_epi8(0x0f);
    /* x's four dwords of a chunk pair (c low, c high, c+1 low, c+1 high) spread to the lanes */
    const __m512i low_x = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i high_x = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    __m256 acc[4];
    for (int j = 0; j < count; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i sums[4];
        for (int j = 0; j < count; j++) sums[j] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c += 2) {
            const __m512i raw = _mm512_loadu_si512((const void *)(codes + (g * 4 + c) * 32));
            const __m512i lo = _mm512_and_si512(raw, low);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
            for (int j = 0; j < count; j++) {
                const int8_t *x = q->codes + (r0 + j) * cols + QGROUP * g + 8 * c;
                const __m512i xv = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)x));
                sums[j] = _mm512_dpbusd_epi32(sums[j], lo, _mm512_permutexvar_epi32(low_x, xv));
                sums[j] = _mm512_dpbusd_epi32(sums[j], hi, _mm512_permutexvar_epi32(high_x, xv));
            }
        }
        const __m256 scale = lanes8(scales, g * ROWS8, half);
        for (int j = 0; j < count; j++) {
            const __m256i isum = _mm256_add_epi32(_mm512_castsi512_si256(sums[j]),
                                                  _mm512_extracti64x4_epi64(sums[j], 1));
            acc[j] = add_group(acc[j], isum, scale, q, r0 + j, g);
        }
    }
    add_zero_terms(zeros, scales, half, q, r0, groups, count, acc, results);
}
#define NIBBLES8_TILE nibbles8_tile_vnni
#elif defined(HAVE_AVX2)
#define NIBBLES8_TILE nibbles8_tile
#endif

/* The same sums one row and token at a time, for builds without AVX2. */
static void nibbles8_plain(const uint8_t *codes, const void *scales, const void *zeros, int half,
                           const int8_rows *q, int64_t r, int64_t cols, float results[ROWS8]) {
    const int64_t groups = cols / QGROUP;
    const int8_t *x = q->codes + r * cols;
    for (int j = 0; j < ROWS8; j++) {
        float acc = 0.0f, zacc = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            int32_t isum = 0;
            for (int c = 0; c < 4; c++)
                for (int b = 0; b < 4; b++) {
                    const uint8_t byte = codes[(g * 4 + c) * 32 + 4 * j + b];
                    isum += (byte & 15) * x[QGROUP * g + 8 * c + b];
                    isum += (byte >> 4) * x[QGROUP * g + 8 * c + 4 + b];
                }
            const float factor = lane_value(scales, g * ROWS8 + j, half) * q->scales[r * q->padded + g];
            acc = fmaf((float)isum, factor, acc);
        }
        for (int64_t g = 0; g < groups; g++)
            zacc = fmaf(zero_value(zeros, scales, g * ROWS8 + j, half), q->sums[r * q->padded + g],
                        zacc);
        results[j] = acc + zacc;
    }
}

static inline void store_rows8(void *out, int out_is_bf16, int64_t first, int64_t count,
                               const float values[ROWS8]) {
#if defined(HAVE_AVX2)
    if (count == ROWS8) {
        if (out_is_bf16)
            to_bf16x8(_mm256_loadu_ps(values), (bf16 *)out + first);
        else
            _mm256_storeu_ps((float *)out + first, _mm256_loadu_ps(values));
        return;
    }
#endif
    for (int64_t i = 0; i < count; i++) store_result(out, out_is_bf16, first + i, values[i]);
}

/* out[m][n] = sum_k x[m][k] * w[n][k] for 4-bit weights interleaved by eight rows (above), x
 * rounded to 8 bits per 32 (quantize_rows). rows need not be a multiple of 8: the last block's
 * missing rows are zeros in the layout and are not stored. */
static void matmul_nibbles8(const uint8_t *codes, const void *scales, const void *zeros, int half,
                            int64_t rows, int64_t cols, const float *xf, int64_t m, void *out,
                            int32_t out_is_bf16, int32_t threads) {
    int8_rows q;
    quantize_rows(xf, m, cols, 0, &q);
    const int64_t blocks = (rows + ROWS8 - 1) / ROWS8, groups = cols / QGROUP;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t block = 0; block < blocks; block++) {
        const uint8_t *c = codes + block * groups * 4 * 32;
        const int64_t at = block * groups * ROWS8 * (half ? 2 : 4); /* bytes */
        const void *s = (const char *)scales + at, *z = zeros ? (const char *)zeros + at : NULL;
        const int64_t first = block * ROWS8, kept = rows - first < ROWS8 ? rows - first : ROWS8;
        float values[4][ROWS8];
#if defined(HAVE_AVX2)
        for (int64_t r = 0; r < m; r += 4) {
            const int count = m - r >= 4 ? 4 : (int)(m - r);
            __m256 results[4];
            switch (count) { /* constant counts: sums stay in registers */
            case 4: NIBBLES8_TILE(c, s, z, half, &q, r, cols, 4, results); break;
            case 3: NIBBLES8_TILE(c, s, z, half, &q, r, cols, 3, results); break;
            case 2: NIBBLES8_TILE(c, s, z, half, &q, r, cols, 2, results); break;
            default: NIBBLES8_TILE(c, s, z, half, &q, r, cols, 1, results); break;
            }
            for (int j = 0; j < count; j++) {
                _mm256_storeu_ps(values[j], results[j]);
                store_rows8(out, out_is_bf16, (r + j) * rows + first, kept, values[j]);
            }
        }
#else
        for (int64_t r = 0; r < m; r++) {
            nibbles8_plain(c, s, z, half, &q, r, cols, values[0]);
            store_rows8(out, out_is_bf16, r * rows + first, kept, values[0]);
        }
#endif
    }
    free_int8_rows(&q);
}

/* -- int8 weights in groups of 32 or 16 (Q8_0, Q5_0; Q6_K), eight rows interleaved ---------------
 *
 * As the 4-bit layout above, for codes a byte each: per block of 8 rows and group g of 32, chunk
 * c (0..7) is 32 bytes, byte 4j + b holding row j's weight 32g + 4c + b; scales
 * [block][group][sub][8], `sub` scales a group (2 for Q6_K's groups of 16: chunks 0-3, then 4-7).
 * Row j, token t, per scale's part h: isum = its exact integer sum of products; acc =
 * fma((float)isum, scale * x_scale, acc), part by part, group by group. AVX2 multiplies |w| by x
 * with w's sign (maddubs takes an unsigned operand; |w| and |x| <= 127, so pairs never
 * saturate); VNNI multiplies w + 128 (w xor 0x80, unsigned) and takes 128 times x's sum over the
 * part back off: the same integers either way. */

/* x's integer sum over part h of group g (of `sub`), token r */
static inline int32_t part_sum(const int8_rows *q, int64_t r, int64_t g, int sub, int h) {
    const int32_t all = q->isums[r * q->padded + g], low = q->lows[r * q->padded + g];
    return sub == 1 ? all : h == 0 ? low : all - low;
}

#if defined(HAVE_VNNI512)
static inline __attribute__((always_inline)) void int8x8_tile(
    const uint8_t *codes, const void *scales, int half, int sub, const int8_rows *q, int64_t r0,
    int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m256 acc[4];
    for (int j = 0; j < count; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i sums[2][4];
        for (int j = 0; j < count; j++) sums[0][j] = sums[1][j] = _mm512_setzero_si512();
        for (int c = 0; c < 8; c += 2) {
            const int h = sub == 2 && c >= 4;
            const __m512i raw = _mm512_loadu_si512((const void *)(codes + (g * 8 + c) * 32));
            const __m512i unsigned_w = _mm512_xor_si512(raw, flip);
            for (int j = 0; j < count; j++) {
                const int8_t *x = q->codes + (r0 + j) * cols + QGROUP * g + 4 * c;
                int64_t pair;
                memcpy(&pair, x, 8);
                const __m512i xv = _mm512_permutexvar_epi32(spread, _mm512_set1_epi64(pair));
                sums[h][j] = _mm512_dpbusd_epi32(sums[h][j], unsigned_w, xv);
            }
        }
        for (int h = 0; h < sub; h++) {
            const __m256 scale = lanes8(scales, (g * sub + h) * ROWS8, half);
            for (int j = 0; j < count; j++) {
                const __m256i shifted = _mm256_add_epi32(_mm512_castsi512_si256(sums[h][j]),
                                                         _mm512_extracti64x4_epi64(sums[h][j], 1));
                const __m256i isum = _mm256_sub_epi32(
                    shifted, _mm256_set1_epi32(128 * part_sum(q, r0 + j, g, sub, h)));
                acc[j] = add_group(acc[j], isum, scale, q, r0 + j, g);
            }
        }
    }
    for (int j = 0; j < count; j++) results[j] = acc[j];
}
#elif defined(HAVE_AVX2)
static inline __attribute__((always_inline)) void int8x8_tile(
    const uint8_t *codes, const void *scales, int half, int sub, const int8_rows *q, int64_t r0,
    int64_t cols, int count, __m256 *results) {
    const int64_t groups = cols / QGROUP;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int j = 0; j < count; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i sums[2][4];
        for (int j = 0; j < count; j++) sums[0][j] = sums[1][j] = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const int h = sub == 2 && c >= 4;
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(codes + (g * 8 + c) * 32));
            const __m256i magnitudes = _mm256_sign_epi8(raw, raw);
            for (int j = 0; j < count; j++) {
                int32_t four;
                memcpy(&four, q->codes + (r0 + j) * cols + QGROUP * g + 4 * c, 4);
                const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(four), raw);
                sums[h][j] = _mm256_add_epi32(
                    sums[h][j],
                    _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_x), ones));
            }
        }
        for (int h = 0; h < sub; h++) {
            const __m256 scale = lanes8(scales, (g * sub + h) * ROWS8, half);
            for (int j = 0; j < count; j++)
                acc[j] = add_group(acc[j], sums[h][j], scale, q, r0 + j, g);
        }
    }
    for (int j = 0; j < count; j++) results[j] = acc[j];
}
#endif

/* The same sums one row and token at a time, for builds without AVX2. */
static void int8x8_plain(const uint8_t *codes, const void *scales, int half, int sub,
                         const int8_rows *q, int64_t r, int64_t cols, float results[ROWS8]) {
    const int64_t groups = cols / QGROUP;
    const int8_t *x = q->codes + r * cols;
    for (int j = 0; j < ROWS8; j++) {
        float acc = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            int32_t isum[2] = {0, 0};
            for (int c = 0; c < 8; c++)
                for (int b = 0; b < 4; b++)
                    isum[sub == 2 && c >= 4] +=
                        (int8_t)codes[(g * 8 + c) * 32 + 4 * j + b] * x[QGROUP * g + 4 * c + b];
            for (int h = 0; h < sub; h++) {
                const float factor = lane_value(scales, (g * sub + h) * ROWS8 + j, half) *
                                     q->scales[r * q->padded + g];
                acc = fmaf((float)isum[h], factor, acc);
            }
        }
        results[j] = acc;
    }
}

static void matmul_int8x8(const uint8_t *codes, const void *scales, int half, int sub,
                          int64_t rows, int64_t cols, const float *xf, int64_t m, void *out,
                          int32_t out_is_bf16, int32_t threads) {
    int8_rows q;
    quantize_rows(xf, m, cols, sub == 2, &q);
    const int64_t blocks = (rows + ROWS8 - 1) / ROWS8, groups = cols / QGROUP;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t block = 0; block < blocks; block++) {
        const uint8_t *c = codes + block * groups * 8 * 32;
        const void *s = (const char *)scales + block * groups * sub * ROWS8 * (half ? 2 : 4);
        const int64_t first = block * ROWS8, kept = rows - first < ROWS8 ? rows - first : ROWS8;
        float values[4][ROWS8];
#if defined(HAVE_AVX2)
        for (int64_t r = 0; r < m; r += 4) {
            const int count = m - r >= 4 ? 4 : (int)(m - r);
            __m256 results[4];
            /* constant counts and parts: sums stay in registers */
#define TILES(SUB)                                                                           \
    switch (count) {                                                                         \
    case 4: int8x8_tile(c, s, half, SUB, &q, r, cols, 4, results); break;                   \
    case 3: int8x8_tile(c, s, half, SUB, &q, r, cols, 3, results); break;                   \
    case 2: int8x8_tile(c, s, half, SUB, &q, r, cols, 2, results); break;                   \
    default: int8x8_tile(c, s, half, SUB, &q, r, cols, 1, results); break;                  \
    }
            if (sub == 2) {
                TILES(2)
            } else {
                TILES(1)
            }
#undef TILES
            for (int j = 0; j < count; j++) {
                _mm256_storeu_ps(values[j], results[j]);
                store_rows8(out, out_is_bf16, (r + j) * rows + first, kept, values[j]);
            }
        }
#else
        for (int64_t r = 0; r < m; r++) {
            int8x8_plain(c, s, half, sub, &q, r, cols, values[0]);
            store_rows8(out, out_is_bf16, r * rows + first, kept, values[0]);
        }
#endif
    }
    free_int8_rows(&q);
}

/* out[m][n] = sum_k x[m][k] * w[n][k] (cols a multiple of 32), for weights in exact_kernels'
 * own forms: float32 rows (`f32`), int8 codes with a float32 scale (and zero) per `group`
 * weights (the exact form of Q8_0, Q5_x and Q6_K blocks), or 4-bit codes (`code_bits` 4) with a
 * scale and zero per 32 (Q4_0, Q4_1, Q4_K). With `int8_x`, 4-bit codes and int8 codes in groups
 * of 32 or 16 without zeros (Q8_0, Q5_0, Q6_K), both then interleaved by eight rows (matmul_nibbles8,
 * matmul_int8x8), meet x rounded to 8 bits (above), their scales and zeros float16 where
 * `half_scales`; everything else meets float32 x. Each
 * weight row is read once for all m rows; every output is the same fixed-order sum whatever m
 * is. x and out are bf16 or float32. */
void matmul_rows(const float *f32, const uint8_t *codes, const float *scales, const float *zeros,
                 int32_t group, int32_t code_bits, int32_t half_scales, int32_t int8_x,
                 int64_t rows, int64_t cols,
                 const void *x, int32_t x_is_bf16, int64_t m, void *out, int32_t out_is_bf16,
                 int32_t threads) {
    float *scratch = NULL;
    const float *xf = float_rows(x, x_is_bf16, m, cols, &scratch);
    const int64_t groups = group ? cols / group : 0;
    const int64_t row_bytes = code_bits == 4 ? cols / 2 : cols;
    const int kind = f32 ? FLOAT_ROWS
                         : code_bits == 4 ? NIBBLES_WITH_ZEROS
                                          : zeros ? SCALED_CODES_WITH_ZEROS : SCALED_CODES;
    if (int8_x && kind == NIBBLES_WITH_ZEROS) {
        matmul_nibbles8(codes, scales, zeros, half_scales, rows, cols, xf, m, out, out_is_bf16,
                        threads);
        free(scratch);
        return;
    }
    if (int8_x && kind == SCALED_CODES && (group == QGROUP || group == QGROUP / 2)) {
        /* interleaved by eight rows */
        matmul_int8x8(codes, scales, half_scales, QGROUP / group, rows, cols, xf, m, out,
                      out_is_bf16, threads);
        free(scratch);
        return;
    }
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *wide = malloc(sizeof(float) * (size_t)cols);
        float results[8] = {0};
#pragma omp for schedule(static)
        for (int64_t n = 0; n < rows; n++) {
            const weight_row w = {f32 ? f32 + n * cols : NULL, codes ? codes + n * row_bytes : NULL,
                                  scales ? scales + n * groups : NULL,
                                  zeros ? zeros + n * groups : NULL, group, group == 32 ? 1 : 0};
#if defined(__AVX512F__)
            if (kind != NIBBLES_WITH_ZEROS) {
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
                    if (kind == FLOAT_ROWS) {
                        DOT_ROWS(FLOAT_ROWS)
                    } else if (kind == SCALED_CODES_WITH_ZEROS) {
                        DOT_ROWS(SCALED_CODES_WITH_ZEROS)
                    } else {
                        DOT_ROWS(SCALED_CODES)
                    }
#undef DOT_ROWS
                    for (int j = 0; j < 8 && j < left; j++)
                        store_result(out, out_is_bf16, (r + j) * rows + n, results[j]);
                }
                continue;
            }
#endif
            const float *weights = w.f32;
            if (!weights) {
                widen_row(&w, kind, cols, wide);
                weights = wide;
            }
            for (int64_t r = 0; r < m; r += TILE) {
                const int count = m - r >= TILE ? TILE : (int)(m - r);
                const float *xr = xf + r * cols;
                switch (count) { /* constant counts: sums stay in registers */
                case 3: dot_rows8(xr, weights, cols, 3, results); break;
                case 2: dot_rows8(xr, weights, cols, 2, results); break;
                default: dot_rows8(xr, weights, cols, 1, results); break;
                }
                for (int j = 0; j < count; j++)
                    store_result(out, out_is_bf16, (r + j) * rows + n, results[j]);
            }
        }
        free(wide);
    }
    free(scratch);
}

/* -- a whole forward pass ----------------------------------------------------------------------
 *
 * The layers in one call when every weight is matmul_rows' (below AVX-512): the same kernels in
 * the same order as the Python loop over them, without a Python call, a tensor allocation and a
 * ctypes conversion per operation, which cost as much as a small layer's arithmetic. */

typedef struct {
    const float *f32;
    const uint8_t *codes;
    const float *scales, *zeros;
    int32_t group, code_bits, half_scales, int8_x;
    int64_t rows, cols;
} linear_weights;

typedef struct {
    const float *attn_norm, *ffn_norm;
    linear_weights qkv[3]; /* one fused weight (parts 1) or q, k and v (parts 3) */
    int32_t qkv_parts;
    linear_weights output;
    linear_weights gate_up[2]; /* one fused weight (parts 1) or gate and up (parts 2) */
    int32_t gate_up_parts;
    linear_weights down;
    head_ops ops;
} layer_weights;

typedef struct {
    int32_t layers, dim, ffn, heads, kv_heads, head_dim;
    float eps, scale;
    const layer_weights *layer;
    const float *final_norm;
    linear_weights head;
    const float *cos_table, *sin_table;
    float *k_cache; /* [layers][kv_heads][head_dim][slots] */
    bf16 *v_cache;  /* [layers][kv_heads][slots][head_dim] */
    int64_t slots;
} model_weights;

static void linear(const linear_weights *w, const void *x, int32_t x_is_bf16, int64_t m, void *out,
                   int32_t out_is_bf16, int32_t threads) {
    matmul_rows(w->f32, w->codes, w->scales, w->zeros, w->group, w->code_bits, w->half_scales,
                w->int8_x, w->rows, w->cols, x, x_is_bf16, m, out, out_is_bf16, threads);
}

/* Several weights reading the same x: their outputs side by side in `out` (row stride `total`),
 * from one fused call or one call each (each then in its own scratch, copied in). */
static void projection(const linear_weights *parts, int32_t count, const bf16 *x, int64_t m,
                       bf16 *out, int64_t total, int32_t threads) {
    if (count == 1) {
        linear(&parts[0], x, 1, m, out, 1, threads);
        return;
    }
    int64_t first = 0;
    for (int32_t p = 0; p < count; p++) {
        bf16 *part = malloc(sizeof(bf16) * (size_t)(m * parts[p].rows));
        linear(&parts[p], x, 1, m, part, 1, threads);
        for (int64_t r = 0; r < m; r++)
            memcpy(out + r * total + first, part + r * parts[p].rows, sizeof(bf16) * parts[p].rows);
        first += parts[p].rows;
        free(part);
    }
}

/* x: [rows][dim] float32 embeddings, the residual stream (overwritten). Row i sits at
 * positions[i], after the n_prefix cached tokens, and attends to the block rows
 * seen[i * seen_stride ...] (n_seen[i] of them). logits: float32 [rows][vocab], or NULL (a
 * prefill: the last norm and the head are skipped). */
void forward(const model_weights *model, float *x, int32_t rows, const int32_t *positions,
             int32_t n_prefix, const int32_t *seen, int32_t seen_stride, const int32_t *n_seen,
             float *logits, int32_t threads) {
    const int64_t dim = model->dim, ffn = model->ffn;
    const int64_t q_width = (int64_t)model->heads * model->head_dim;
    const int64_t kv_width = (int64_t)model->kv_heads * model->head_dim;
    const int64_t qkv_width = q_width + 2 * kv_width;
    bf16 *h = malloc(sizeof(bf16) * (size_t)(rows * dim));
    bf16 *qkv = malloc(sizeof(bf16) * (size_t)(rows * qkv_width));
    bf16 *attended = malloc(sizeof(bf16) * (size_t)(rows * q_width));
    bf16 *delta = malloc(sizeof(bf16) * (size_t)(rows * dim));
    bf16 *gate_up = malloc(sizeof(bf16) * (size_t)(rows * 2 * ffn));
    bf16 *activated = malloc(sizeof(bf16) * (size_t)(rows * ffn));
    const int64_t k_layer = (int64_t)model->kv_heads * model->head_dim * model->slots;
    residual_rms_norm(x, NULL, 0, model->layer[0].attn_norm, h, 1, rows, dim, model->eps);
    for (int32_t index = 0; index < model->layers; index++) {
        const layer_weights *layer = &model->layer[index];
        projection(layer->qkv, layer->qkv_parts, h, rows, qkv, qkv_width, threads);
        attention(qkv, qkv_width, qkv + q_width, qkv_width, qkv + q_width + kv_width, qkv_width,
                  model->cos_table, model->sin_table, positions, model->k_cache + index * k_layer,
                  model->v_cache + index * k_layer, model->slots, n_prefix, rows, seen, seen_stride,
                  n_seen, attended, model->heads, model->kv_heads, model->head_dim, model->scale,
                  &layer->ops, threads);
        linear(&layer->output, attended, 1, rows, delta, 1, threads);
        residual_rms_norm(x, delta, dim, layer->ffn_norm, h, 1, rows, dim, model->eps);
        projection(layer->gate_up, layer->gate_up_parts, h, rows, gate_up, 2 * ffn, threads);
        silu_mul(gate_up, gate_up + ffn, 2 * ffn, activated, rows, ffn);
        linear(&layer->down, activated, 1, rows, delta, 1, threads);
        if (index + 1 < model->layers) {
            residual_rms_norm(x, delta, dim, model->layer[index + 1].attn_norm, h, 1, rows, dim,
                              model->eps);
        } else if (logits) {
            float *normed = malloc(sizeof(float) * (size_t)(rows * dim));
            residual_rms_norm(x, delta, dim, model->final_norm, normed, 0, rows, dim, model->eps);
            linear(&model->head, normed, 0, rows, logits, 0, threads);
            free(normed);
        }
    }
    free(h);
    free(qkv);
    free(attended);
    free(delta);
    free(gate_up);
    free(activated);
}

/* The indices of each row's k largest values, largest first (ties: the lower index first; a NaN
 * is never taken; a row with fewer than k numbers is padded with -1). One pass over the row: a
 * chunk of 64 none of whose values can enter the current k is skipped whole after one vectorised
 * comparison, so a row of logits costs about one streaming pass. Token recycling keeps every evaluated token's likeliest
 * successors from the logits a pass computed anyway; argpartition took ~150 us a row. */
void top_k_rows(const float *logits, int64_t rows, int64_t vocab, int32_t k, int32_t *out) {
    if (k > 64) k = 64;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = logits + r * vocab;
        float best[64];
        int32_t index[64];
        int32_t n = 0;
        for (int64_t start = 0; start < vocab; start += 4 * LANES) {
            int64_t end = start + 4 * LANES < vocab ? start + 4 * LANES : vocab;
            if (n == k) { /* an OR of comparisons: vectorised, unlike a float max */
                const float worst = best[k - 1];
                int any = 0;
                for (int64_t i = start; i < end; i++) any |= row[i] > worst;
                if (!any) continue;
            }
            for (int64_t i = start; i < end; i++) {
                float value = row[i];
                if (value != value || (n == k && !(value > best[k - 1]))) continue;
                int32_t at = n < k ? n++ : k - 1;
                while (at > 0 && value > best[at - 1]) {
                    best[at] = best[at - 1];
                    index[at] = index[at - 1];
                    at--;
                }
                best[at] = value;
                index[at] = (int32_t)i;
            }
        }
        for (int32_t j = 0; j < k; j++) out[r * k + j] = j < n ? index[j] : -1;
    }
}
