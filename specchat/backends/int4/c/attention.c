/* Attention over a tree block: RoPE, the caches, scores, softmax and the weighted values.
 *
 * Attention loops over exactly the keys a row may attend to, so there are no masked slots to add
 * zeros for, and each reduction runs in explicit lanes so the compiler can vectorise it without
 * reordering anything. */
#include "kernels.h"

/* Queries of one key-value head (its query heads, for every row of the block) that one task
 * scores together: each key and value of the shared prefix is loaded once for all of them. */
#define GROUP_QUERIES 4
/* Keys asked for this many slots ahead of the score loop, each dimension's row: the cache is
 * transposed (a dimension's keys side by side), so a block of keys is 64 short runs a cache's
 * row apart, which the hardware's prefetch does not follow; they come from L3 (the weights streamed
 * since have pushed them out of L2). Asked for a block ahead, passes of 1-8 tokens took 0.95-1.00x
 * their time behind 256 tokens, 0.89-0.98x behind 768 and 0.86-0.92x behind 1,536 (avx2:
 * 0.82-0.88x); the values, read in order, gained nothing from it (docs/bench-log.md, session 56). */
#define KEYS_AHEAD 64
/* registers for accumulators and loads: 32 vectors at AVX-512, 16 below */
#if defined(__AVX512F__)
#define SHARED_REGISTERS 24
#else
#define SHARED_REGISTERS 12
#endif
/* vectors of keys (or of a value row's dimensions) taken at a time for `nq` queries: as many as
 * the registers hold with one accumulator a query each and the loads, up to 4 (keys) or 8 */
#define KEY_VECTORS(nq) ((nq) * 4 + 4 <= SHARED_REGISTERS ? 4 : 2)
#define VALUE_VECTORS(nq) ((nq) == 1 || (nq) * 8 + 8 <= SHARED_REGISTERS ? 8 : (nq) * 4 + 4 <= SHARED_REGISTERS ? 4 : 2)

/* -- each level's vector part: it does the first values and returns where plain C goes on ------ */

#if defined(HAVE_AVX2)
/* lane_sum's LANES partial sums over whole chunks of LANES. */
static inline int64_t lane_sums_vector(const float *values, int64_t count, float acc[LANES]) {
    __m256 low = _mm256_setzero_ps(), high = low;
    int64_t start = 0;
    for (; start + LANES <= count; start += LANES) {
        low = _mm256_add_ps(low, _mm256_loadu_ps(values + start));
        high = _mm256_add_ps(high, _mm256_loadu_ps(values + start + 8));
    }
    _mm256_storeu_ps(acc, low);
    _mm256_storeu_ps(acc + 8, high);
    return start;
}

/* softmax's largest weight over whole vectors of 8 (a max: any order). */
static inline int64_t max_vector(const float *weights, int64_t count, float *top) {
    __m256 tops = _mm256_set1_ps(*top);
    int64_t t = 0;
    for (; t + 8 <= count; t += 8) tops = _mm256_max_ps(_mm256_loadu_ps(weights + t), tops);
    float lanes[8];
    _mm256_storeu_ps(lanes, tops);
    for (int l = 0; l < 8; l++) *top = lanes[l] > *top ? lanes[l] : *top;
    return t;
}

#if defined(__AVX512F__)
/* exp(weight - top) over whole vectors of 16; returns where the vectors of 8 go on. */
static inline int64_t exp_shifted16(float *weights, int64_t count, float top) {
    int64_t t = 0;
    for (; t + 16 <= count; t += 16)
        _mm512_storeu_ps(weights + t, exp_approx16(_mm512_sub_ps(_mm512_loadu_ps(weights + t),
                                                                 _mm512_set1_ps(top))));
    return t;
}
#else
static inline int64_t exp_shifted16(float *weights, int64_t count, float top) {
    (void)weights, (void)count, (void)top;
    return 0;
}
#endif

/* exp(weight - top) over whole vectors of 16 at AVX-512, then of 8: each lane the same
 * operations at either width (vec.h), so the same bits. */
static inline int64_t exp_shifted_vector(float *weights, int64_t count, float top) {
    int64_t t = exp_shifted16(weights, count, top);
    for (; t + 8 <= count; t += 8)
        _mm256_storeu_ps(weights + t,
                         exp_approx8(_mm256_sub_ps(_mm256_loadu_ps(weights + t), _mm256_set1_ps(top))));
    return t;
}

/* Scores of `full` (a constant after inlining, up to 4) whole vectors of keys and `last` keys in
 * the next one's first lanes, one accumulator a vector (independent chains keep the FMA units
 * busy; a chain a vector in turn waited on each fused multiply-add) in one sweep over the
 * dimensions. `room`: the slots from `keys` to the end of a dimension's row. */
static inline __attribute__((always_inline)) void key_vectors_n(
    const float *q, const f16 *keys, int64_t slots, int dim, const int full, int64_t last,
    int64_t room, float scale, float *out) {
    vecf a[5];
    for (int c = 0; c <= full; c++) a[c] = vec_zero();
    for (int d = 0; d < dim; d++) {
        const vecf qd = vec_set1(q[d]);
        const f16 *kd = keys + d * slots;
        for (int c = 0; c < full; c++) a[c] = vec_fmadd(qd, vec_load_half(kd + c * VEC), a[c]);
        if (last)
            a[full] = vec_fmadd(qd, vec_load_half_first(kd + full * VEC, last, room - full * VEC),
                                a[full]);
    }
    const vecf scale_v = vec_set1(scale);
    for (int c = 0; c < full; c++) vec_store(out + c * VEC, vec_mul(a[c], scale_v));
    if (last) vec_store_first(out + full * VEC, last, vec_mul(a[full], scale_v));
}

/* contiguous_scores with VEC keys a vector: four vectors at a time, then the rest (fewer than
 * four, the last partial) in one sweep. Each lane runs the same fused multiply-adds in the same
 * order as key_score. */
static inline __attribute__((always_inline)) int64_t scores_vector(const float *q, const f16 *keys, int64_t slots, int dim,
                                    int64_t count, int64_t room, float scale, float *out) {
    int64_t start = 0;
    for (; start + 4 * VEC <= count; start += 4 * VEC)
        key_vectors_n(q, keys + start, slots, dim, 4, 0, room - start, scale, out + start);
    const int64_t rest = count - start, last = rest % VEC;
    const f16 *tail = keys + start;
    switch (rest / VEC) {
    case 0: if (last) key_vectors_n(q, tail, slots, dim, 0, last, room - start, scale, out + start); break;
    case 1: key_vectors_n(q, tail, slots, dim, 1, last, room - start, scale, out + start); break;
    case 2: key_vectors_n(q, tail, slots, dim, 2, last, room - start, scale, out + start); break;
    default: key_vectors_n(q, tail, slots, dim, 3, last, room - start, scale, out + start); break;
    }
    return count;
}

/* shared_scores for `nq` (a constant after inlining) queries: KEY_VECTORS(nq) vectors of keys at
 * a time, each key vector loaded once for all of them; each lane the fused multiply-adds of key_score in its
 * order. Returns where the plain C goes on. */
static inline __attribute__((always_inline)) int64_t shared_scores_n(
    const float *const *q, const int nq, const f16 *keys, int64_t slots, int dim, int64_t count,
    float scale, float *const *out) {
    const vecf scale_v = vec_set1(scale);
    const int kv = KEY_VECTORS(nq);
    int64_t start = 0;
    for (; start + kv * VEC <= count; start += kv * VEC) {
        vecf a[GROUP_QUERIES][4];
        for (int j = 0; j < nq; j++)
            for (int c = 0; c < kv; c++) a[j][c] = vec_zero();
        for (int d = 0; d < dim; d++) {
            const f16 *kd = keys + d * slots + start;
            _mm_prefetch((const char *)(kd + KEYS_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(kd + KEYS_AHEAD + 32), _MM_HINT_T0);
            vecf k[4];
            for (int c = 0; c < kv; c++) k[c] = vec_load_half(kd + c * VEC);
            for (int j = 0; j < nq; j++) {
                const vecf qd = vec_set1(q[j][d]);
                for (int c = 0; c < kv; c++) a[j][c] = vec_fmadd(qd, k[c], a[j][c]);
            }
        }
        for (int j = 0; j < nq; j++)
            for (int c = 0; c < kv; c++) vec_store(out[j] + start + c * VEC, vec_mul(a[j][c], scale_v));
    }
    return start;
}

static inline int64_t shared_scores_vector(const float *const *q, int nq, const f16 *keys,
                                           int64_t slots, int dim, int64_t count, float scale,
                                           float *const *out) {
    switch (nq) { /* a constant count keeps the accumulators in registers */
    case 1: return shared_scores_n(q, 1, keys, slots, dim, count, scale, out);
    case 2: return shared_scores_n(q, 2, keys, slots, dim, count, scale, out);
    case 3: return shared_scores_n(q, 3, keys, slots, dim, count, scale, out);
    default: return shared_scores_n(q, GROUP_QUERIES, keys, slots, dim, count, scale, out);
    }
}

/* shared_values for `nq` (a constant after inlining) queries and head sizes a multiple of VEC:
 * VALUE_VECTORS(nq) vectors of dimensions at a time, each value row loaded once for all queries;
 * each lane the plain C's fused multiply-adds over the keys in order. */
static inline __attribute__((always_inline)) void shared_values_n(
    const float *const *weights, const int nq, int64_t count, const bf16 *values, int dim,
    float *const *acc) {
    const int most = VALUE_VECTORS(nq);
    for (int first = 0; first < dim; first += most * VEC) {
        const int vectors = (dim - first >= most * VEC ? most * VEC : dim - first) / VEC;
        vecf sum[GROUP_QUERIES][8];
        for (int j = 0; j < nq; j++)
            for (int c = 0; c < vectors; c++) sum[j][c] = vec_zero();
        for (int64_t t = 0; t < count; t++) {
            const bf16 *row = values + t * dim + first;
            vecf v[8];
            for (int c = 0; c < vectors; c++) v[c] = vec_load_bf16(row + VEC * c);
            for (int j = 0; j < nq; j++) {
                const vecf w = vec_set1(weights[j][t]);
                for (int c = 0; c < vectors; c++) sum[j][c] = vec_fmadd(w, v[c], sum[j][c]);
            }
        }
        for (int j = 0; j < nq; j++)
            for (int c = 0; c < vectors; c++) vec_store(acc[j] + first + VEC * c, sum[j][c]);
    }
}

static inline int shared_values_vector(const float *const *weights, int nq, int64_t count,
                                       const bf16 *values, int dim, float *const *acc) {
    if (dim % VEC) return 0;
    switch (nq) {
    case 1: shared_values_n(weights, 1, count, values, dim, acc); break;
    case 2: shared_values_n(weights, 2, count, values, dim, acc); break;
    case 3: shared_values_n(weights, 3, count, values, dim, acc); break;
    default: shared_values_n(weights, GROUP_QUERIES, count, values, dim, acc); break;
    }
    return 1;
}
/* own_values for head sizes a multiple of VEC: each dimension's running sum held in a vector. */
static inline int own_values_vector(const float *weights, int64_t count, const int32_t *rows,
                                    const bf16 *values, int dim, float *acc) {
    if (dim % VEC) return 0;
    for (int first = 0; first < dim; first += VEC) {
        vecf sum = vec_load(acc + first);
        for (int64_t t = 0; t < count; t++)
            sum = vec_fmadd(vec_set1(weights[t]), vec_load_bf16(values + rows[t] * dim + first), sum);
        vec_store(acc + first, sum);
    }
    return 1;
}

#else
static inline int64_t lane_sums_vector(const float *values, int64_t count, float acc[LANES]) {
    (void)values, (void)count, (void)acc;
    return 0;
}
static inline int64_t max_vector(const float *weights, int64_t count, float *top) {
    (void)weights, (void)count, (void)top;
    return 0;
}
static inline int64_t exp_shifted_vector(float *weights, int64_t count, float top) {
    (void)weights, (void)count, (void)top;
    return 0;
}
static inline __attribute__((always_inline)) int64_t scores_vector(const float *q, const f16 *keys, int64_t slots, int dim,
                                    int64_t count, int64_t room, float scale, float *out) {
    (void)q, (void)keys, (void)slots, (void)dim, (void)count, (void)room, (void)scale, (void)out;
    return 0;
}
static inline int64_t shared_scores_vector(const float *const *q, int nq, const f16 *keys,
                                           int64_t slots, int dim, int64_t count, float scale,
                                           float *const *out) {
    (void)q, (void)nq, (void)keys, (void)slots, (void)dim, (void)count, (void)scale, (void)out;
    return 0;
}
static inline int shared_values_vector(const float *const *weights, int nq, int64_t count,
                                       const bf16 *values, int dim, float *const *acc) {
    (void)weights, (void)nq, (void)count, (void)values, (void)dim, (void)acc;
    return 0;
}
static inline int own_values_vector(const float *weights, int64_t count, const int32_t *rows,
                                    const bf16 *values, int dim, float *acc) {
    (void)weights, (void)count, (void)rows, (void)values, (void)dim, (void)acc;
    return 0;
}
#endif

/* -- the plain C: each result's order of operations --------------------------------------------- */

/* Sum of `count` floats in LANES interleaved partial sums, then halving: a fixed order. */
static inline float lane_sum(const float *values, int64_t count) {
    float acc[LANES] = {0};
    int64_t start = lane_sums_vector(values, count, acc);
    for (; start + LANES <= count; start += LANES)
        for (int lane = 0; lane < LANES; lane++) acc[lane] += values[start + lane];
    for (int64_t i = start; i < count; i++) acc[i - start] += values[i];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int lane = 0; lane < width; lane++) acc[lane] += acc[lane + width];
    return acc[0];
}

/* One head's bf16 projection as float32, its bias added and its RMS norm applied (as llama.cpp's
 * rms_norm then mul: squares summed in double by squares_sum, the scale applied before the
 * weight). */
static inline void head_in(const bf16 *in, const float *bias, const float *norm, float eps,
                           float *out, int dim) {
    for (int d = 0; d < dim; d++) out[d] = bias ? from_bf16(in[d]) + bias[d] : from_bf16(in[d]);
    if (norm) {
        const float scale = 1.0f / __builtin_sqrtf((float)(squares_sum(out, dim) / (double)dim) + eps);
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
static inline float key_score(const float *q, const f16 *keys, int64_t slots, int dim,
                              int64_t slot) {
    float s = 0.0f;
    for (int d = 0; d < dim; d++) s = fmaf(q[d], from_half(keys[d * slots + slot]), s);
    return s;
}

/* key_score for the keys in slots rows[0..count-1], LANES keys at a time: each lane the fused
 * multiply-adds of key_score in its order (the same bits), LANES chains side by side where one
 * key's chain waited on each multiply-add. A tree's rows that are not a leading chain (a beam's
 * ancestors, a row a beam a step: decoding/beam.py) took most of a beam pass's time one by one. */
static void gathered_scores(const float *q, const f16 *keys, int64_t slots, int dim,
                            const int32_t *rows, int64_t count, float scale, float *out) {
    int64_t start = 0;
    for (; start + LANES <= count; start += LANES) {
        float acc[LANES] = {0};
        for (int d = 0; d < dim; d++) {
            const float qd = q[d];
            const f16 *kd = keys + d * slots;
            for (int lane = 0; lane < LANES; lane++)
                acc[lane] = fmaf(qd, from_half(kd[rows[start + lane]]), acc[lane]);
        }
        for (int lane = 0; lane < LANES; lane++) out[start + lane] = acc[lane] * scale;
    }
    for (int64_t t = start; t < count; t++) out[t] = key_score(q, keys, slots, dim, rows[t]) * scale;
}

/* key_score for slots 0..count-1, LANES keys at a time (each lane the same fused multiply-adds
 * in the same order as key_score, so a key's score is the same in a lane or alone). `room`: the
 * slots from `keys` to the end of a dimension's row (what a vector may read past `count`). */
static void contiguous_scores(const float *q, const f16 *keys, int64_t slots, int dim,
                              int64_t count, int64_t room, float scale, float *out) {
    int64_t start = scores_vector(q, keys, slots, dim, count, room, scale, out);
    for (; start + LANES <= count; start += LANES) {
        float acc[LANES] = {0};
        for (int d = 0; d < dim; d++) {
            const float qd = q[d];
            const f16 *kd = keys + d * slots + start;
            for (int lane = 0; lane < LANES; lane++) acc[lane] = fmaf(qd, from_half(kd[lane]), acc[lane]);
        }
        for (int lane = 0; lane < LANES; lane++) out[start + lane] = acc[lane] * scale;
    }
    for (int64_t t = start; t < count; t++) out[t] = key_score(q, keys, slots, dim, t) * scale;
}

/* contiguous_scores of `nq` (at most GROUP_QUERIES) queries against keys 0..count-1 of one
 * key-value head: each key is scored as key_score scores it, whichever queries share the load. */
static void shared_scores(const float *const *q, int nq, const f16 *keys, int64_t slots, int dim,
                          int64_t count, float scale, float *const *out) {
    const int64_t start = shared_scores_vector(q, nq, keys, slots, dim, count, scale, out);
    for (int j = 0; j < nq; j++)
        contiguous_scores(q[j], keys + start, slots, dim, count - start, slots - start, scale,
                          out[j] + start);
}

/* weighted_values of `nq` queries over the keys in slots 0..count-1: each dimension of each
 * query accumulates over the keys in order (as the values of a block's own rows go on). */
static void shared_values(const float *const *weights, int nq, int64_t count, const bf16 *values,
                          int dim, float *const *acc) {
    int done;
    switch (dim) { /* constant sizes let the accumulators live in registers */
    case 64: done = shared_values_vector(weights, nq, count, values, 64, acc); break;
    case 128: done = shared_values_vector(weights, nq, count, values, 128, acc); break;
    default: done = shared_values_vector(weights, nq, count, values, dim, acc); break;
    }
    if (done) return;
    for (int j = 0; j < nq; j++) {
        for (int d = 0; d < dim; d++) acc[j][d] = 0.0f;
        for (int64_t t = 0; t < count; t++) {
            const float w = weights[j][t];
            const bf16 *row = values + t * dim;
            for (int d = 0; d < dim; d++) acc[j][d] = fmaf(w, from_bf16(row[d]), acc[j][d]);
        }
    }
}

/* acc += sum over t of weights[t] * value(slot rows[t]), continuing each dimension's sum over
 * the keys in order (a block row's own keys, after the prefix's). */
static void own_values(const float *weights, int64_t count, const int32_t *rows, const bf16 *values,
                       int dim, float *acc) {
    if (own_values_vector(weights, count, rows, values, dim, acc)) return;
    for (int64_t t = 0; t < count; t++) {
        const bf16 *row = values + rows[t] * dim;
        for (int d = 0; d < dim; d++) acc[d] = fmaf(weights[t], from_bf16(row[d]), acc[d]);
    }
}

/* weights = exp(weights - max) / their lane_sum, in place. */
static inline void softmax(float *weights, int64_t count) {
    float top = -3.0e38f;
    for (int64_t t = max_vector(weights, count, &top); t < count; t++)
        top = weights[t] > top ? weights[t] : top;
    for (int64_t t = exp_shifted_vector(weights, count, top); t < count; t++)
        weights[t] = exp_approx(weights[t] - top);
    const float inverse = 1.0f / lane_sum(weights, count);
    for (int64_t t = 0; t < count; t++) weights[t] *= inverse;
}

/* One layer's attention for a block of `rows` tokens behind `n_prefix` cached ones (and, with
 * `first_row` > 0, behind that many rows of earlier blocks of the same tree, still in their slots:
 * a beam's tree grown a row a beam at a time, decoding/beam.py).
 *
 * q/k/v: bf16 rows (each with its stride) straight from the projections. Row i's k and v go to
 * cache slot n_prefix + first_row + i (k after RoPE, as float16 as llama.cpp keeps it — half
 * the bytes a pass reads of float32 keys — in a transposed cache [kv_heads, head_dim, slots] so
 * that scores vectorise over keys; v as bf16 in [kv_heads, slots, head_dim]). Row i then attends
 * to the prefix and to the tree rows listed in seen[i * seen_stride ...] (n_seen[i] of them, row
 * r in slot n_prefix + r: its ancestors in depth order, then itself), so keys come in the order a
 * chain evaluated alone would have them; key t of that order sits at position t. `window` > 0 (a local layer of
 * Gemma 3): row i sees only keys at positions past positions[i] - window, as llama.cpp masks them
 * (the earlier ones weigh exactly nothing). `softcap` > 0 (Gemma 2): each scaled score becomes
 * softcap * tanh(score / softcap) before the softmax. No `cos_table` (SmolLM3's layers without
 * RoPE): q and k are not rotated. out: bf16 [rows, heads * head_dim]. */
void attention(const bf16 *q, int64_t q_stride, const bf16 *k, int64_t k_stride, const bf16 *v,
               int64_t v_stride, const float *cos_table, const float *sin_table,
               const int32_t *positions, int32_t window, f16 *k_cache, bf16 *v_cache,
               int64_t slots, int32_t n_prefix, int32_t first_row, int32_t rows,
               const int32_t *seen, int32_t seen_stride, const int32_t *n_seen, bf16 *out,
               int32_t heads,
               int32_t kv_heads, int32_t head_dim, float scale, float softcap,
               const head_ops *ops, int32_t threads) {
    const int half = head_dim / 2;
    const int64_t q_width = (int64_t)heads * head_dim, kv_width = (int64_t)kv_heads * head_dim;
    const float *q_bias = ops->bias, *k_bias = ops->bias ? ops->bias + q_width : NULL;
    const float *v_bias = ops->bias ? ops->bias + q_width + kv_width : NULL;
    float *q_rot = malloc(sizeof(float) * (size_t)rows * heads * head_dim);
    const int32_t group = heads / kv_heads;
    /* each task: up to GROUP_QUERIES queries (row i, head h) of one key-value head, sharing its
     * prefix's keys and values; a head's queries split so that every thread has two tasks or more
     * where there are queries enough (fewer, larger tasks left a thread idle). A task's time is
     * mostly its head's keys and values coming from L3, whatever its queries, so more, smaller
     * tasks read them more often: with four a thread, a one-token pass of three query heads a
     * key-value head read each head's three times; with two, twice, and passes took 0.91-0.98x
     * their time behind 768 and 1,536 tokens (session 56; measured before the weights and keys
     * were asked for ahead, two a head had run 7-10% slower at avx2). Each query's arithmetic
     * is the same whichever task holds it. */
    const int64_t queries = (int64_t)rows * group;
    int64_t chunks = (queries + GROUP_QUERIES - 1) / GROUP_QUERIES;
    const int64_t wanted = (2 * (int64_t)threads + kv_heads - 1) / kv_heads;
    if (chunks < wanted) chunks = wanted < queries ? wanted : queries;
    const int64_t per_chunk = (queries + chunks - 1) / chunks;
    chunks = (queries + per_chunk - 1) / per_chunk;
    const int64_t tasks = (int64_t)kv_heads * chunks;
    int32_t most_seen = 0;
    for (int32_t i = 0; i < rows; i++) most_seen = n_seen[i] > most_seen ? n_seen[i] : most_seen;
    const int64_t most_keys = (int64_t)n_prefix + most_seen;
#pragma omp parallel num_threads(threads) if (tasks > 1 && threads > 1)
    {
        /* each row's heads brought in first, shared by the threads: a query head of a row, or a
         * key-value head for every row (its cache rows one thread's, so no two threads write one
         * cache line); one thread alone took 6% of a drafted row's time while the others
         * waited (docs/bench-log.md, session 55) */
#pragma omp for schedule(static, 1)
        for (int64_t item = 0; item < (int64_t)rows * heads + kv_heads; item++) {
            if (item < (int64_t)rows * heads) {
                const int32_t i = (int32_t)(item / heads), h = (int32_t)(item % heads);
                float *qh = q_rot + item * head_dim;
                head_in(q + i * q_stride + h * head_dim, q_bias ? q_bias + h * head_dim : NULL,
                        ops->q_norm, ops->eps, qh, head_dim);
                if (cos_table) rope(qh, cos_table + (int64_t)positions[i] * half,
                                    sin_table + (int64_t)positions[i] * half, head_dim, ops->neox);
                continue;
            }
            const int32_t g = (int32_t)(item - (int64_t)rows * heads);
            float rotated[MAX_HEAD_DIM];
            for (int32_t i = 0; i < rows; i++) {
                const int64_t slot = (int64_t)n_prefix + first_row + i;
                head_in(k + i * k_stride + g * head_dim, k_bias ? k_bias + g * head_dim : NULL,
                        ops->k_norm, ops->eps, rotated, head_dim);
                if (cos_table) rope(rotated, cos_table + (int64_t)positions[i] * half,
                                    sin_table + (int64_t)positions[i] * half, head_dim, ops->neox);
                f16 *keys = k_cache + (int64_t)g * head_dim * slots;
                for (int d = 0; d < head_dim; d++) keys[d * slots + slot] = to_half(rotated[d]);
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
        float *weights = malloc(sizeof(float) * (size_t)(GROUP_QUERIES * (most_keys + LANES)));
        float acc[GROUP_QUERIES][MAX_HEAD_DIM];
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            const int32_t g = (int32_t)(task / chunks);
            const int64_t first_query = (task % chunks) * per_chunk;
            const int nq = (int)(queries - first_query < per_chunk ? queries - first_query : per_chunk);
            const f16 *keys = k_cache + (int64_t)g * head_dim * slots;
            const bf16 *values = v_cache + (int64_t)g * slots * head_dim;
            const float *qs[GROUP_QUERIES];
            float *ws[GROUP_QUERIES], *accs[GROUP_QUERIES];
            int32_t row_of[GROUP_QUERIES], head_of[GROUP_QUERIES];
            for (int j = 0; j < nq; j++) {
                const int64_t query = first_query + j;
                row_of[j] = (int32_t)(query / group);
                head_of[j] = g * group + (int32_t)(query % group);
                qs[j] = q_rot + ((int64_t)row_of[j] * heads + head_of[j]) * head_dim;
                ws[j] = weights + (int64_t)j * (most_keys + LANES);
                accs[j] = acc[j];
            }
            /* the prefix's keys, shared by every row */
            shared_scores(qs, nq, keys, slots, head_dim, n_prefix, scale, ws);
            for (int j = 0; j < nq; j++) {
                const int32_t i = row_of[j];
                const int32_t *mine = seen + (int64_t)i * seen_stride;
                const int64_t count = (int64_t)n_prefix + n_seen[i];
                float *w = ws[j];
                /* the block rows of a leading chain sit in consecutive slots after the prefix;
                 * the others (a tree's ancestors) are gathered one by one */
                int32_t run = 0;
                while (run < n_seen[i] && mine[run] == run) run++;
                contiguous_scores(qs[j], keys + n_prefix, slots, head_dim, run, slots - n_prefix, scale,
                                  w + n_prefix);
                gathered_scores(qs[j], keys + n_prefix, slots, head_dim, mine + run, n_seen[i] - run,
                                scale, w + n_prefix + run);
                if (softcap > 0.0f) {
                    const float inverse_cap = 1.0f / softcap;
                    for (int64_t t = 0; t < count; t++) w[t] = softcap * tanhf(w[t] * inverse_cap);
                }
                int64_t first = window > 0 ? (int64_t)positions[i] - window + 1 : 0;
                first = first > 0 ? (first < count ? first : count - 1) : 0;
                softmax(w + first, count - first);
                for (int64_t t = 0; t < first; t++) w[t] = 0.0f;
            }
            /* the weighted values: the prefix's for all queries at once, then each row's own */
            shared_values((const float *const *)ws, nq, n_prefix, values, head_dim, accs);
            for (int j = 0; j < nq; j++) {
                const int32_t i = row_of[j];
                const int32_t *mine = seen + (int64_t)i * seen_stride;
                float *a = accs[j];
                own_values(ws[j] + n_prefix, n_seen[i], mine, values + n_prefix * head_dim, head_dim, a);
                bf16 *o = out + (int64_t)i * heads * head_dim + (int64_t)head_of[j] * head_dim;
                for (int d = 0; d < head_dim; d++) o[d] = to_bf16(a[d]);
            }
        }
        free(weights);
    }
    free(q_rot);
}

/* to_half over n values: how the key cache rounds, for the tests to hold against numpy's float16. */
void halves_of(const float *values, int64_t n, f16 *out) {
    for (int64_t i = 0; i < n; i++) out[i] = to_half(values[i]);
}
