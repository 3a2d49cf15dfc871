/* matmul_rows: one weight against rows of x, handed to the weight's format. */
#include "kernels.h"
#include "quantize.h"

#if defined(HAVE_AVX2)
static inline int64_t widen_bf16_vector(const bf16 *narrow, int64_t count, float *wide) {
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(wide + i, from_bf16x8(narrow + i));
    return i;
}
#else
static inline int64_t widen_bf16_vector(const bf16 *narrow, int64_t count, float *wide) {
    (void)narrow, (void)count, (void)wide;
    return 0;
}
#endif

/* Rows of x as float32: `x` itself, or bf16 rows widened into `scratch` (exactly). */
static const float *float_rows(const void *x, int x_is_bf16, int64_t m, int64_t cols,
                               float **scratch) {
    if (!x_is_bf16) return (const float *)x;
    float *wide = malloc(sizeof(float) * (size_t)(m * cols));
    const bf16 *narrow = (const bf16 *)x;
    for (int64_t i = widen_bf16_vector(narrow, m * cols, wide); i < m * cols; i++)
        wide[i] = from_bf16(narrow[i]);
    *scratch = wide;
    return wide;
}

/* out[m][n] = sum_k x[m][k] * w[n][k] (cols a multiple of 32), for weights in the kernels' own
 * forms: float32 rows (`f32`), int8 codes with a float32 scale (and zero) per `group` weights
 * (the exact form of Q8_0, Q5_x and Q6_K blocks), or 4-bit codes (`code_bits` 4) with a scale
 * and zero per 32 (Q4_0, Q4_1, Q4_K), or 5-bit codes (5: Q5_0, Q5_1, Q5_K, which only the
 * interleaved layout holds). With `int8_x`, 4-bit and 5-bit codes and int8 codes in groups of 32
 * (Q8_0) or 16 without zeros (Q6_K), all then interleaved by eight rows (q4_rows8.c,
 * q8_rows8.c), meet x rounded to 8 bits (quantize.h), their scales and zeros in `scale_form`
 * (rows8.h); everything else meets float32 x (dense.c). Each weight row is read once for all
 * m rows; every output is the same fixed-order sum whatever m is. x and out are bf16 or
 * float32. */
void matmul_rows(const float *f32, const uint8_t *codes, const float *scales, const float *zeros,
                 int32_t group, int32_t code_bits, int32_t scale_form, int32_t int8_x,
                 int64_t rows, int64_t cols, const void *x, int32_t x_is_bf16, int64_t m,
                 void *out, int32_t out_is_bf16, int32_t threads) {
    const int int8_codes = !f32 && code_bits == 8 && (group == QGROUP || (group == QGROUP / 2 && !zeros));
    if (!f32 && (code_bits == 5 || (int8_x && code_bits == 4))) {
        matmul_nibbles8(codes, scales, zeros, scale_form, code_bits == 5, rows, cols, x, x_is_bf16,
                        m, out, out_is_bf16, threads);
    } else if (int8_x && int8_codes) {
        matmul_int8x8(codes, scales, zeros, scale_form, QGROUP / group, rows, cols, x, x_is_bf16,
                      m, out, out_is_bf16, threads);
    } else {
        float *scratch = NULL;
        const float *xf = float_rows(x, x_is_bf16, m, cols, &scratch);
        matmul_dense(f32, codes, scales, zeros, group, code_bits, rows, cols, xf, m, out,
                     out_is_bf16, threads);
        free(scratch);
    }
}

void linear(const linear_weights *w, const void *x, int32_t x_is_bf16, int64_t m, void *out,
            int32_t out_is_bf16, int32_t threads) {
    matmul_rows(w->f32, w->codes, w->scales, w->zeros, w->group, w->code_bits, w->scale_form,
                w->int8_x, w->rows, w->cols, x, x_is_bf16, m, out, out_is_bf16, threads);
}
