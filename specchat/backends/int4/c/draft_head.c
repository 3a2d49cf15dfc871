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

/* `residual` the last committed row's sum before the final norm (weight `final_norm`; NULL: it
 * is the final hidden state h already), `embedding` the pending token's input embedding; `out`
 * gets the shortlisted token whose score is highest (the first of equals) and `sure` its share
 * of the scores' softmax over the shortlist: how sure the head is. */
void draft_head_guess(const draft_head *head, const float *residual, const float *final_norm,
                      float eps, const float *embedding, int32_t threads, int32_t *out,
                      float *sure) {
    const int64_t dim = head->outer.rows, width = head->inner.rows, n = head->rows.rows;
    float *joined = malloc(sizeof(float) * (size_t)(2 * dim));
    float *inner = malloc(sizeof(float) * (size_t)width);
    float *z = malloc(sizeof(float) * (size_t)dim);
    float *scores = malloc(sizeof(float) * (size_t)n);
    if (final_norm) {
        residual_rms_norm((float *)residual, NULL, 0, final_norm, joined, 0, 1, dim, eps, 1);
    } else {
        memcpy(joined, residual, sizeof(float) * (size_t)dim);
    }
    const float e_length = length_of(embedding, dim);
    const float scale = length_of(joined, dim) / (e_length > 1e-6f ? e_length : 1e-6f);
    for (int64_t i = 0; i < dim; i++) joined[dim + i] = embedding[i] * scale;
    linear(&head->inner, joined, 0, 1, inner, 0, threads);
    for (int64_t i = 0; i < width; i++) {
        const float v = inner[i] + head->inner_bias[i];
        const float clipped = v < -60.0f ? -60.0f : (v > 60.0f ? 60.0f : v);
        inner[i] = v / (1.0f + expf(-clipped)); /* SiLU */
    }
    linear(&head->outer, inner, 0, 1, z, 0, threads);
    for (int64_t i = 0; i < dim; i++) z[i] += joined[i] + head->outer_bias[i];
    linear(&head->rows, z, 0, 1, scores, 0, threads);
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (scores[i] > scores[best]) best = i;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += exp((double)(scores[i] - scores[best]));
    *out = head->shortlist[best];
    *sure = (float)(1.0 / total);
    free(joined);
    free(inner);
    free(z);
    free(scores);
}
