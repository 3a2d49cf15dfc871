/* The kernels' parts as the forward and each other call them; the functions Python calls through
 * ctypes (forward, matmul_rows, top_k_rows, tile_blocks, draft_head_guesses) are declared here
 * too. */
#ifndef SPECCHAT_KERNELS_H
#define SPECCHAT_KERNELS_H

#include "base.h"

/* What a family does to a head's q or k between the projection and the cache: a bias (qwen2), an
 * RMS norm over the head (qwen3), and which pairs RoPE rotates. NULL pointers: none of it. */
typedef struct {
    const float *bias; /* [q | k | v] widths, or NULL */
    const float *q_norm, *k_norm; /* [head_dim] each, or NULL */
    float eps;
    int32_t neox; /* rotate (x[j], x[j + dim/2]) instead of (x[2j], x[2j+1]) */
} head_ops;

/* norms.c: row by row, the rows shared by the threads where a block has rows enough that the
 * work outweighs the fork (a row's result is the same whichever thread computes it). */
#define SHARED_ROWS(rows, threads) ((threads) > 1 && (rows) >= 4)
void residual_rms_norm(float *x, const bf16 *delta, int64_t delta_stride, const float *weight,
                       void *out, int out_is_bf16, int64_t rows, int64_t dim, float eps,
                       int32_t threads);
void silu_mul(const bf16 *gate, const bf16 *up, int64_t stride, bf16 *out, int64_t rows,
              int64_t width, int32_t threads);
void gelu_mul(const bf16 *gate, const bf16 *up, int64_t stride, bf16 *out, int64_t rows,
              int64_t width, int32_t threads);
void rms_norm_rows(bf16 *rows_io, const float *weight, int64_t rows, int64_t dim, float eps,
                   int32_t threads);

/* attention.c */
void attention(const bf16 *q, int64_t q_stride, const bf16 *k, int64_t k_stride, const bf16 *v,
               int64_t v_stride, const float *cos_table, const float *sin_table,
               const int32_t *positions, int32_t window, f16 *k_cache, bf16 *v_cache,
               int64_t slots, int32_t n_prefix, int32_t first_row, int32_t rows,
               const int32_t *seen, int32_t seen_stride, const int32_t *n_seen, bf16 *out,
               int32_t heads,
               int32_t kv_heads, int32_t head_dim, float scale, float softcap,
               const head_ops *ops, int32_t threads);
void halves_of(const float *values, int64_t n, f16 *out); /* the key cache's rounding */

/* matmul.c, and the weight formats it hands a call to: out[m][n] = sum_k x[m][k] * w[n][k] */
void matmul_rows(const float *f32, const uint8_t *codes, const float *scales, const float *zeros,
                 int32_t group, int32_t code_bits, int32_t scale_form, int32_t int8_x,
                 int64_t rows, int64_t cols, const void *x, int32_t x_is_bf16, int64_t m,
                 void *out, int32_t out_is_bf16, int32_t threads);
/* A weight as the forward and the draft head hand it to matmul_rows (mirrored in c_structs.py). */
typedef struct {
    const float *f32;
    const uint8_t *codes;
    const float *scales, *zeros;
    int32_t group, code_bits, scale_form, int8_x;
    int64_t rows, cols;
} linear_weights;
void linear(const linear_weights *w, const void *x, int32_t x_is_bf16, int64_t m, void *out,
            int32_t out_is_bf16, int32_t threads); /* matmul_rows for `w` */
void matmul_nibbles8(const uint8_t *codes, const void *scales, const void *zeros, int form,
                     int five, int64_t rows, int64_t cols, const void *x, int x_is_bf16, int64_t m, void *out,
                     int32_t out_is_bf16, int32_t threads); /* q4_rows8.c */
void matmul_int8x8(const uint8_t *codes, const void *scales, const void *zeros, int form, int sub, int64_t rows,
                   int64_t cols, const void *x, int x_is_bf16, int64_t m, void *out, int32_t out_is_bf16,
                   int32_t threads); /* q8_rows8.c */
void matmul_dense(const float *f32, const uint8_t *codes, const float *scales, const float *zeros,
                  int32_t group, int32_t code_bits, int64_t rows, int64_t cols, const float *xf,
                  int64_t m, void *out, int32_t out_is_bf16, int32_t threads); /* dense.c */

void tile_blocks(int32_t *out); /* q4_rows8.c: 1, or 2 where AVX-512's tiles take pairs */

/* top_k.c */
void top_k_rows(const float *logits, int64_t rows, int64_t vocab, int32_t k, int32_t *out);

/* draft_head.c */
typedef struct draft_head draft_head;
void draft_head_guesses(const draft_head *head, const float *residual, const float *final_norm,
                        float eps, const float *embedding, int32_t m, int32_t threads,
                        int32_t *out, float *sure);
/* A draft head riding along a pass (mirrored in c_structs.py): for every row, its greedy token
 * and the head's guess at the token after it, from the row's final hidden state and the token's
 * embedding, read from the model's Q8_0 embedding blocks. */
typedef struct {
    const draft_head *head;
    const uint8_t *embedding; /* the token embedding as Q8_0 blocks: a float16 scale, 32 int8 */
    const int32_t *next; /* a chain's drafted token after each row (the last: -1), or NULL */
    int32_t *tokens, *guesses; /* [rows] each; tokens -1 where a row was not guessed */
    float *sure;               /* [rows] */
} pass_guesses;
void guess_rows(const pass_guesses *into, const float *hidden, const float *logits, int64_t rows,
                int64_t dim, int64_t vocab, int32_t threads);

#endif
