/* The draft head's guess (decoding/draft_head.py) in one call, its products on the passes'
 * threads (the team idles between passes; one thread took 0.12 ms a step there): the same
 * few steps as Python with numpy cost 0.3-0.4 ms a decoding step beside a 3 ms pass, most of it
 * Python's calls and a pass's swept caches, not the 1.6 M products. The structure is mirrored
 * in c_structs.py. */
#include "kernels.h"

struct draft_head {
    linear_weights inner; /* [width][2 dim]: [h; e scaled to |h|] in */
    linear_weights outer; /* [dim][width]: added to h */
    linear_weights rows;  /* [shortlist][dim]: the model's output rows for the shortlist */
    const float *inner_bias, *outer_bias;
    const int32_t *shortlist;
};

static float length_of(const float *v, int64_t n) { return (float)sqrt(squares_sum(v, n)); }

/* `residual`: m rows' sums before the final norm (weight `final_norm`; NULL: they are the final
 * hidden states h already), `embedding` each row's pending token's input embedding [m][dim];
 * out[i] gets row i's shortlisted token whose score is highest (the first of equals) and sure[i]
 * its share of the scores' softmax over the shortlist: how sure the head is. The rows share one
 * read of the head's weights. */
void draft_head_guesses(const draft_head *head, const float *residual, const float *final_norm,
                        float eps, const float *embedding, int32_t m, int32_t threads,
                        int32_t *out, float *sure) {
    const int64_t dim = head->outer.rows, width = head->inner.rows, n = head->rows.rows;
    float *joined = malloc(sizeof(float) * (size_t)(m * 2 * dim));
    float *inner = malloc(sizeof(float) * (size_t)(m * width));
    float *z = malloc(sizeof(float) * (size_t)(m * dim));
    float *scores = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t r = 0; r < m; r++) {
        float *h = joined + r * 2 * dim;
        if (final_norm) {
            residual_rms_norm((float *)residual + r * dim, NULL, 0, final_norm, h, 0, 1, dim, eps,
                              1);
        } else {
            memcpy(h, residual + r * dim, sizeof(float) * (size_t)dim);
        }
        const float *e = embedding + r * dim;
        const float e_length = length_of(e, dim);
        const float scale = length_of(h, dim) / (e_length > 1e-6f ? e_length : 1e-6f);
        for (int64_t i = 0; i < dim; i++) h[dim + i] = e[i] * scale;
    }
    linear(&head->inner, joined, 0, m, inner, 0, threads);
    for (int64_t i = 0; i < m * width; i++) {
        const float v = inner[i] + head->inner_bias[i % width];
        const float clipped = v < -60.0f ? -60.0f : (v > 60.0f ? 60.0f : v);
        inner[i] = v / (1.0f + expf(-clipped)); /* SiLU */
    }
    linear(&head->outer, inner, 0, m, z, 0, threads);
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < dim; i++)
            z[r * dim + i] += joined[r * 2 * dim + i] + head->outer_bias[i];
    linear(&head->rows, z, 0, m, scores, 0, threads);
    for (int64_t r = 0; r < m; r++) {
        const float *row = scores + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (row[i] > row[best]) best = i;
        double total = 0.0;
        for (int64_t i = 0; i < n; i++) total += exp((double)(row[i] - row[best]));
        out[r] = head->shortlist[best];
        sure[r] = (float)(1.0 / total);
    }
    free(joined);
    free(inner);
    free(z);
    free(scores);
}

/* Inside the pass, after its logits: the caches still hold the rows and the head's input, and no
 * Python runs between (in Python after the pass, the same guess took 0.13-0.22 ms a step, its
 * lookups and the head's weights read again after the pass swept the caches). A Q8_0 embedding
 * row is its blocks' int8 codes times their float16 scale, as gguf's dequantization computes it. */
void guess_rows(const pass_guesses *into, const float *hidden, const float *logits, int64_t rows,
                int64_t dim, int64_t vocab, int32_t threads) {
    int64_t first = 0, count = rows;
    if (into->next) { /* a chain: its rows' greedy tokens up to where verification stops */
        for (int64_t r = 0; r < rows; r++) into->tokens[r] = -1;
        for (first = 0; first < rows; first++) {
            top_k_rows(logits + first * vocab, 1, vocab, 1, into->tokens + first);
            if (first == rows - 1 || into->tokens[first] != into->next[first]) break;
        }
        for (int64_t r = 0; r < first; r++) into->tokens[r] = -1; /* rows not guessed */
        count = 1;
    } else {
        top_k_rows(logits, rows, vocab, 1, into->tokens);
    }
    float *embedding = malloc(sizeof(float) * (size_t)(count * dim));
    const int64_t blocks = dim / 32, block_bytes = 2 + 32;
    for (int64_t r = 0; r < count; r++) {
        const int32_t token = into->tokens[first + r] < 0 ? 0 : into->tokens[first + r];
        const uint8_t *row = into->embedding + (int64_t)token * blocks * block_bytes;
        for (int64_t b = 0; b < blocks; b++) {
            f16 bits;
            memcpy(&bits, row + b * block_bytes, sizeof bits);
            const float scale = from_half(bits);
            const int8_t *codes = (const int8_t *)(row + b * block_bytes + 2);
            for (int64_t i = 0; i < 32; i++)
                embedding[r * dim + b * 32 + i] = scale * (float)codes[i];
        }
    }
    draft_head_guesses(into->head, hidden + first * dim, NULL, 0.0f, embedding, (int32_t)count,
                       threads, into->guesses + first, into->sure + first);
    free(embedding);
}
