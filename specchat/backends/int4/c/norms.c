/* RMSNorm (with the residual add before it) and SwiGLU's activation, row by row. */
#include "kernels.h"

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

/* silu_mul's first values, 8 at a time at the vector levels; returns how many it did. */
#if defined(HAVE_AVX2)
static inline int64_t silu_mul_vector(const bf16 *g, const bf16 *u, bf16 *o, int64_t width) {
    int64_t i = 0;
    for (; i + 8 <= width; i += 8) {
        const __m256 gv = from_bf16x8(g + i);
        const __m256 e = exp_approx8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
        const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        to_bf16x8(_mm256_mul_ps(silu, from_bf16x8(u + i)), o + i);
    }
    return i;
}
#else
static inline int64_t silu_mul_vector(const bf16 *g, const bf16 *u, bf16 *o, int64_t width) {
    (void)g, (void)u, (void)o, (void)width;
    return 0;
}
#endif

/* out = silu(gate) * up, row by row (SwiGLU). */
void silu_mul(const bf16 *gate, const bf16 *up, int64_t stride, bf16 *out, int64_t rows,
              int64_t width) {
    for (int64_t row = 0; row < rows; row++) {
        const bf16 *g = gate + row * stride, *u = up + row * stride;
        bf16 *o = out + row * width;
        for (int64_t i = silu_mul_vector(g, u, o, width); i < width; i++) {
            const float gv = from_bf16(g[i]);
            o[i] = to_bf16(gv / (1.0f + exp_approx(-gv)) * from_bf16(u[i]));
        }
    }
}
