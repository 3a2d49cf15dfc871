/* The vector levels' shared helpers (AVX2, and AVX-512 which has AVX2 too).
 *
 * First base.h's helpers on 8 floats at once, by the same operations (so the same bits). Then
 * `vecf`, a float vector of the build's widest width (VEC lanes: 16 at AVX-512, 8 at AVX2), for
 * the loops that differ between the two only in how many lanes they take at once. */
#ifndef SPECCHAT_VEC_H
#define SPECCHAT_VEC_H

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

/* exp_approx on a vector of W bits (256: 8 floats, 512: 16) by the scalar's operations in its
 * order, so the same bits at every width: one body, pasted into each width's intrinsics. */
#define EXP_APPROX(name, W)                                                                        \
    static inline __m##W name(__m##W x) {                                                          \
        /* min/max with x second: a NaN passes through, as in the scalar comparisons */            \
        x = _mm##W##_max_ps(_mm##W##_set1_ps(-87.0f), _mm##W##_min_ps(_mm##W##_set1_ps(88.0f), x)); \
        const __m##W shifter = _mm##W##_set1_ps(12582912.0f);                                      \
        const __m##W n = _mm##W##_sub_ps(                                                          \
            _mm##W##_add_ps(_mm##W##_mul_ps(x, _mm##W##_set1_ps(1.44269504088896341f)), shifter),  \
            shifter);                                                                              \
        __m##W r = _mm##W##_sub_ps(x, _mm##W##_mul_ps(n, _mm##W##_set1_ps(0.693359375f)));         \
        r = _mm##W##_add_ps(r, _mm##W##_mul_ps(n, _mm##W##_set1_ps(2.12194440e-4f)));              \
        __m##W p = _mm##W##_set1_ps(1.9875691500e-4f);                                             \
        p = _mm##W##_add_ps(_mm##W##_mul_ps(p, r), _mm##W##_set1_ps(1.3981999507e-3f));            \
        p = _mm##W##_add_ps(_mm##W##_mul_ps(p, r), _mm##W##_set1_ps(8.3334519073e-3f));            \
        p = _mm##W##_add_ps(_mm##W##_mul_ps(p, r), _mm##W##_set1_ps(4.1665795894e-2f));            \
        p = _mm##W##_add_ps(_mm##W##_mul_ps(p, r), _mm##W##_set1_ps(1.6666665459e-1f));            \
        p = _mm##W##_add_ps(_mm##W##_mul_ps(p, r), _mm##W##_set1_ps(5.0000001201e-1f));            \
        p = _mm##W##_add_ps(_mm##W##_add_ps(_mm##W##_mul_ps(p, _mm##W##_mul_ps(r, r)), r),          \
                            _mm##W##_set1_ps(1.0f));                                               \
        const __m##W##i bits = _mm##W##_slli_epi32(                                                \
            _mm##W##_add_epi32(_mm##W##_cvttps_epi32(n), _mm##W##_set1_epi32(127)), 23);           \
        return _mm##W##_mul_ps(p, _mm##W##_castsi##W##_ps(bits));                                  \
    }
EXP_APPROX(exp_approx8, 256)

#if defined(__AVX512F__)
/* from_bf16x8 and to_bf16x8 on 16 floats: the same operations, so the same bits. */
static inline __m512 from_bf16x16(const bf16 *values) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)values);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

static inline void to_bf16x16(__m512 values, bf16 *out) {
    const __m512i bits = _mm512_castps_si512(values);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i halves = _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(0x7fc0));
    _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi32_epi16(halves));
}

EXP_APPROX(exp_approx16, 512)
#endif

/* The 8 lanes of v summed by halving (4, 2, 1): a fixed order. */
static inline float halving_sum8(__m256 v) {
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

#if defined(__AVX512F__)
#define VEC 16
typedef __m512 vecf;
static inline vecf vec_zero(void) { return _mm512_setzero_ps(); }
static inline vecf vec_set1(float value) { return _mm512_set1_ps(value); }
static inline vecf vec_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vec_store(float *p, vecf v) { _mm512_storeu_ps(p, v); }
static inline vecf vec_mul(vecf a, vecf b) { return _mm512_mul_ps(a, b); }
static inline vecf vec_fmadd(vecf a, vecf b, vecf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vecf vec_load_bf16(const bf16 *p) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
static inline vecf vec_load_half(const f16 *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* the first `count` (< VEC) lanes; the others read as zero and are never written */
static inline vecf vec_load_first(const float *p, int64_t count) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << count) - 1u), p);
}
static inline void vec_store_first(float *p, int64_t count, vecf v) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << count) - 1u), v);
}
#else
#define VEC 8
typedef __m256 vecf;
static inline vecf vec_zero(void) { return _mm256_setzero_ps(); }
static inline vecf vec_set1(float value) { return _mm256_set1_ps(value); }
static inline vecf vec_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vec_store(float *p, vecf v) { _mm256_storeu_ps(p, v); }
static inline vecf vec_mul(vecf a, vecf b) { return _mm256_mul_ps(a, b); }
static inline vecf vec_fmadd(vecf a, vecf b, vecf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vecf vec_load_bf16(const bf16 *p) { return from_bf16x8(p); }
static inline vecf vec_load_half(const f16 *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256i first_lanes(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vecf vec_load_first(const float *p, int64_t count) {
    return _mm256_maskload_ps(p, first_lanes(count));
}
static inline void vec_store_first(float *p, int64_t count, vecf v) {
    _mm256_maskstore_ps(p, first_lanes(count), v);
}
#endif

/* vec_load_half of the first `count` (< VEC) halves, where `room` halves from p may be read: the
 * other lanes hold whatever lies there (zero where nothing may be read), for loops that never
 * store them. A copy through the stack cost a call and a stalled load a dimension: the partial
 * tail of a query's keys took 7% of a decode over 500-token contexts (perf, session 41). */
#if defined(__AVX512BW__) && defined(__AVX512VL__)
static inline vecf vec_load_half_first(const f16 *p, int64_t count, int64_t room) {
    (void)room;
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << count) - 1u), p));
}
#else
static inline vecf vec_load_half_first(const f16 *p, int64_t count, int64_t room) {
    if (room >= VEC) return vec_load_half(p);
    f16 lanes[VEC] = {0};
    memcpy(lanes, p, sizeof(f16) * (size_t)count);
    return vec_load_half(lanes);
}
#endif

#endif
