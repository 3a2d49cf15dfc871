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
#include <stdint.h>
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

/* One layer's attention for a block of `rows` tokens behind `n_prefix` cached ones.
 *
 * q/k/v: bf16 rows (each with its stride) straight from the projections. Row i's k and v go to
 * cache slot n_prefix + i (k after RoPE, as float32; v as bf16). Row i then attends to the prefix
 * and to the block rows listed in seen[i * seen_stride ...] (n_seen[i] of them: its ancestors
 * in depth order, then itself), so keys come in the order a chain evaluated alone would have
 * them. out: bf16 [rows, heads * head_dim]. Caches: [kv_heads, slots, head_dim]. */
void attention(const bf16 *q, int64_t q_stride, const bf16 *k, int64_t k_stride, const bf16 *v,
               int64_t v_stride, const float *cos_table, const float *sin_table,
               const int32_t *positions, float *k_cache, bf16 *v_cache, int64_t slots,
               int32_t n_prefix, int32_t rows, const int32_t *seen, int32_t seen_stride,
               const int32_t *n_seen, bf16 *out, int32_t heads, int32_t kv_heads,
               int32_t head_dim, float scale, int32_t threads) {
    const int half = head_dim / 2;
    float *q_rot = malloc(sizeof(float) * (size_t)rows * heads * head_dim);
    for (int32_t i = 0; i < rows; i++) {
        const float *cos_row = cos_table + (int64_t)positions[i] * half;
        const float *sin_row = sin_table + (int64_t)positions[i] * half;
        for (int32_t h = 0; h < heads; h++)
            rope(q + i * q_stride + h * head_dim, q_rot + ((int64_t)i * heads + h) * head_dim,
                 cos_row, sin_row, head_dim);
        for (int32_t g = 0; g < kv_heads; g++) {
            const int64_t slot = ((int64_t)g * slots + n_prefix + i) * head_dim;
            rope(k + i * k_stride + g * head_dim, k_cache + slot, cos_row, sin_row, head_dim);
            memcpy(v_cache + slot, v + i * v_stride + g * head_dim, sizeof(bf16) * head_dim);
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
            const float *keys = k_cache + (int64_t)g * slots * head_dim;
            const bf16 *values = v_cache + (int64_t)g * slots * head_dim;
            const int32_t *mine = seen + (int64_t)i * seen_stride;
            const int64_t count = (int64_t)n_prefix + n_seen[i];
            float top = -3.0e38f;
            for (int64_t t = 0; t < count; t++) {
                const int64_t slot = t < n_prefix ? t : n_prefix + mine[t - n_prefix];
                const float s = dot(qh, keys + slot * head_dim, head_dim) * scale;
                weights[t] = s;
                top = s > top ? s : top;
            }
            for (int64_t t = 0; t < count; t++) weights[t] = exp_approx(weights[t] - top);
            const float inverse = 1.0f / lane_sum(weights, count);
            for (int d = 0; d < head_dim; d++) acc[d] = 0.0f;
            for (int64_t t = 0; t < count; t++) {
                const int64_t slot = t < n_prefix ? t : n_prefix + mine[t - n_prefix];
                const float w = weights[t] * inverse;
                const bf16 *vrow = values + slot * head_dim;
                for (int d = 0; d < head_dim; d++) acc[d] += w * from_bf16(vrow[d]);
            }
            bf16 *o = out + (int64_t)i * heads * head_dim + (int64_t)h * head_dim;
            for (int d = 0; d < head_dim; d++) o[d] = to_bf16(acc[d]);
        }
        free(weights);
    }
    free(q_rot);
}
