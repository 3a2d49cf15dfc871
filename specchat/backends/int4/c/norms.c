/* RMSNorm (with the residual add before it, or of a sublayer's output: Gemma's norms after
 * attention and the MLP) and the gated activations (SwiGLU's SiLU, Gemma's GELU), row by row. */
#include "kernels.h"

/* x += delta (when given); out = x / rms(x) * weight, as llama.cpp's rms_norm then mul:
 * squares summed in double (squares_sum), the scale applied before the weight. out is bf16 or
 * float32. */
void residual_rms_norm(float *x, const bf16 *delta, int64_t delta_stride, const float *weight,
                       void *out, int out_is_bf16, int64_t rows, int64_t dim, float eps,
                       int32_t threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (SHARED_ROWS(rows, threads))
    for (int64_t row = 0; row < rows; row++) {
        float *xr = x + row * dim;
        if (delta) {
            const bf16 *dr = delta + row * delta_stride;
            for (int64_t i = 0; i < dim; i++) xr[i] += from_bf16(dr[i]);
        }
        const float mean = (float)(squares_sum(xr, dim) / (double)dim);
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

/* silu_mul's first values 16 at a time at AVX-512 (a row's SiLU took 4-5 cycles a value 8 at a
 * time); returns how many it did. */
#if defined(__AVX512F__)
static inline int64_t silu_mul_wide(const bf16 *g, const bf16 *u, bf16 *o, int64_t width) {
    int64_t i = 0;
    for (; i + 16 <= width; i += 16) {
        const __m512 gv = from_bf16x16(g + i);
        const __m512 negated = /* the sign flipped as integers: xor_ps needs AVX-512 DQ */
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv), _mm512_set1_epi32(INT32_MIN)));
        const __m512 e = exp_approx16(negated);
        const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        to_bf16x16(_mm512_mul_ps(silu, from_bf16x16(u + i)), o + i);
    }
    return i;
}
#else
static inline int64_t silu_mul_wide(const bf16 *g, const bf16 *u, bf16 *o, int64_t width) {
    (void)g, (void)u, (void)o, (void)width;
    return 0;
}
#endif

/* silu_mul's first values at the vector levels: 16 at a time where the build has them, then 8;
 * returns how many it did. */
#if defined(HAVE_AVX2)
static inline int64_t silu_mul_vector(const bf16 *g, const bf16 *u, bf16 *o, int64_t width) {
    int64_t i = silu_mul_wide(g, u, o, width);
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
              int64_t width, int32_t threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (SHARED_ROWS(rows, threads))
    for (int64_t row = 0; row < rows; row++) {
        const bf16 *g = gate + row * stride, *u = up + row * stride;
        bf16 *o = out + row * width;
        for (int64_t i = silu_mul_vector(g, u, o, width); i < width; i++) {
            const float gv = from_bf16(g[i]);
            o[i] = to_bf16(gv / (1.0f + exp_approx(-gv)) * from_bf16(u[i]));
        }
    }
}

/* rows_io = rows_io / rms(rows_io) * weight in place, each row in float32 (as residual_rms_norm:
 * squares summed in double by squares_sum, the scale applied before the weight), stored back as bf16: Gemma's
 * norm of a sublayer's output before the residual add. */
void rms_norm_rows(bf16 *rows_io, const float *weight, int64_t rows, int64_t dim, float eps,
                   int32_t threads) {
    float *all = malloc(sizeof(float) * (size_t)(rows * dim)); /* the rows in float32, once a call */
#pragma omp parallel for num_threads(threads) schedule(static) if (SHARED_ROWS(rows, threads))
    for (int64_t row = 0; row < rows; row++) {
        bf16 *r = rows_io + row * dim;
        float *values = all + row * dim;
        for (int64_t i = 0; i < dim; i++) values[i] = from_bf16(r[i]);
        const float scale = 1.0f / __builtin_sqrtf((float)(squares_sum(values, dim) / (double)dim) + eps);
        for (int64_t i = 0; i < dim; i++) r[i] = to_bf16((values[i] * scale) * weight[i]);
    }
    free(all);
}

/* out = gelu(gate) * up, row by row, GELU by its tanh approximation as llama.cpp's ggml_gelu
 * (which looks it up at float16 precision; this computes it: within the bf16 the result is kept
 * in). Plain C at every level, so every level gives the same bits. */
void gelu_mul(const bf16 *gate, const bf16 *up, int64_t stride, bf16 *out, int64_t rows,
              int64_t width, int32_t threads) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef = 0.044715f;
#pragma omp parallel for num_threads(threads) schedule(static) if (SHARED_ROWS(rows, threads))
    for (int64_t row = 0; row < rows; row++) {
        const bf16 *g = gate + row * stride, *u = up + row * stride;
        bf16 *o = out + row * width;
        for (int64_t i = 0; i < width; i++) {
            const float x = from_bf16(g[i]);
            const float gelu = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef * x * x)));
            o[i] = to_bf16(gelu * from_bf16(u[i]));
        }
    }
}
