/* A whole forward pass in one call.
 *
 * The layers in one call: the same kernels in the same order as a Python loop over them, without
 * a Python call, a tensor allocation and a ctypes conversion per operation, which cost as much as
 * a small layer's arithmetic. The structures are mirrored in c_structs.py. */
#include "kernels.h"

typedef struct {
    const float *attn_norm, *ffn_norm;
    const float *attn_post_norm, *ffn_post_norm; /* Gemma's norms of the sublayers' outputs */
    const float *cos_table, *sin_table; /* this layer's RoPE (Gemma 3's local base; NULL: none) */
    int32_t window;                              /* a local layer's sliding window (0: none) */
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
    float softcap; /* the scores' soft cap before the softmax (Gemma 2; 0: none) */
    int32_t gelu; /* the MLP's gate through GELU (Gemma) instead of SiLU */
    const layer_weights *layer;
    const float *final_norm;
    linear_weights head;
    f16 *k_cache; /* float16 [layers][kv_heads][head_dim][slots] */
    bf16 *v_cache;  /* [layers][kv_heads][slots][head_dim] */
    int64_t slots;
} model_weights;

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
 * positions[i], after the n_prefix cached tokens, and attends to the tree rows
 * seen[i * seen_stride ...] (n_seen[i] of them; this block's row i is tree row first_row + i,
 * the rows before it an earlier block's, still in their slots: attention.c). logits: float32
 * [rows][vocab], or NULL (a prefill: the last norm and the head are skipped). guesses: where a
 * draft head rides along the pass (draft_head.c), or NULL. */
void forward(const model_weights *model, float *x, int32_t rows, const int32_t *positions,
             int32_t n_prefix, int32_t first_row, const int32_t *seen, int32_t seen_stride,
             const int32_t *n_seen, float *logits, const pass_guesses *guesses, int32_t threads) {
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
    residual_rms_norm(x, NULL, 0, model->layer[0].attn_norm, h, 1, rows, dim, model->eps, threads);
    for (int32_t index = 0; index < model->layers; index++) {
        const layer_weights *layer = &model->layer[index];
        projection(layer->qkv, layer->qkv_parts, h, rows, qkv, qkv_width, threads);
        attention(qkv, qkv_width, qkv + q_width, qkv_width, qkv + q_width + kv_width, qkv_width,
                  layer->cos_table, layer->sin_table, positions, layer->window,
                  model->k_cache + index * k_layer, model->v_cache + index * k_layer, model->slots,
                  n_prefix, first_row, rows, seen, seen_stride, n_seen, attended, model->heads,
                  model->kv_heads, model->head_dim, model->scale, model->softcap, &layer->ops,
                  threads);
        linear(&layer->output, attended, 1, rows, delta, 1, threads);
        if (layer->attn_post_norm)
            rms_norm_rows(delta, layer->attn_post_norm, rows, dim, model->eps, threads);
        residual_rms_norm(x, delta, dim, layer->ffn_norm, h, 1, rows, dim, model->eps, threads);
        projection(layer->gate_up, layer->gate_up_parts, h, rows, gate_up, 2 * ffn, threads);
        if (model->gelu) {
            gelu_mul(gate_up, gate_up + ffn, 2 * ffn, activated, rows, ffn, threads);
        } else {
            silu_mul(gate_up, gate_up + ffn, 2 * ffn, activated, rows, ffn, threads);
        }
        linear(&layer->down, activated, 1, rows, delta, 1, threads);
        if (layer->ffn_post_norm)
            rms_norm_rows(delta, layer->ffn_post_norm, rows, dim, model->eps, threads);
        if (index + 1 < model->layers) {
            residual_rms_norm(x, delta, dim, model->layer[index + 1].attn_norm, h, 1, rows, dim,
                              model->eps, threads);
        } else if (logits) {
            float *normed = malloc(sizeof(float) * (size_t)(rows * dim));
            residual_rms_norm(x, delta, dim, model->final_norm, normed, 0, rows, dim, model->eps,
                              threads);
            linear(&model->head, normed, 0, rows, logits, 0, threads);
            if (guesses) guess_rows(guesses, normed, logits, rows, dim, model->head.rows, threads);
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
