/* What every part of the int4 runtime's kernels shares: the instruction-set level a build is for,
 * bf16 and float16 as stored, exp, and how a result is stored.
 *
 * Each result row is computed by one fixed sequence of float operations that depends only on that
 * row's own inputs and on how many keys it sees: never on how many rows share the call, nor on
 * keys it does not see. A row of a block therefore equals, bit for bit, the same token evaluated
 * alone behind the same prefix. Each job's file holds its plain C, which fixes that sequence, and
 * the vector code of each level beside it (chosen per build, never inside a function body); a
 * level's vector code computes the plain C's bits wherever the two are meant to agree.
 *
 * bf16 is stored as uint16_t (the upper half of a float32), rounded to nearest even as torch does.
 */
#ifndef SPECCHAT_BASE_H
#define SPECCHAT_BASE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) /* x86-64-v3; every AVX-512 build has them too */
#include <immintrin.h>
#define HAVE_AVX2 1
#if defined(__AVXVNNI__) /* AVX-VNNI: Alder Lake, Sapphire Rapids, Zen 5 and later */
#define HAVE_AVXVNNI 1
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__) /* Ice Lake, Zen 4 and later */
#define HAVE_VNNI512 1
#endif
#endif

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

/* The squares of x[0 .. dim-1] summed in double, as llama.cpp's rms_norm sums them, but in
 * SQUARE_LANES running sums (square i in sum i % SQUARE_LANES) added pairwise at the end: one
 * running sum waited on each add before the next (~2,300 cycles a norm of 576, two norms a layer
 * and row; all of a pass's norms 2-4% of it, docs/bench-log.md session 49), the lanes' adds
 * overlap. The order is fixed, so every level and block size gets the same bits; the double can
 * differ from one running sum's in its last bits, and a row's float mean with it only where
 * those bits decide its rounding. */
#define SQUARE_LANES 16
#if defined(HAVE_AVX2)
/* The lanes over whole runs of SQUARE_LANES; returns where the plain C goes on. */
static inline int64_t squares_vector(const float *x, int64_t dim, double lanes[SQUARE_LANES]) {
    __m256d acc[SQUARE_LANES / 4];
    for (int l = 0; l < SQUARE_LANES / 4; l++) acc[l] = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + SQUARE_LANES <= dim; i += SQUARE_LANES)
        for (int h = 0; h < SQUARE_LANES / 8; h++) { /* squared in float, added in double */
            const __m256 v = _mm256_loadu_ps(x + i + 8 * h);
            const __m256 squares = _mm256_mul_ps(v, v);
            acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(squares)));
            acc[2 * h + 1] =
                _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(squares, 1)));
        }
    for (int l = 0; l < SQUARE_LANES / 4; l++) _mm256_storeu_pd(lanes + 4 * l, acc[l]);
    return i;
}
#else
static inline int64_t squares_vector(const float *x, int64_t dim, double lanes[SQUARE_LANES]) {
    (void)x, (void)dim;
    for (int l = 0; l < SQUARE_LANES; l++) lanes[l] = 0.0;
    return 0;
}
#endif
static inline double squares_sum(const float *x, int64_t dim) {
    double lanes[SQUARE_LANES];
    for (int64_t i = squares_vector(x, dim, lanes); i < dim; i++)
        lanes[i % SQUARE_LANES] += (double)(x[i] * x[i]);
    for (int width = SQUARE_LANES / 2; width > 0; width /= 2) /* pairs, then pairs of pairs */
        for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    return lanes[0];
}

typedef uint16_t f16; /* float16 bits: the key cache's */

/* float16 bits to float32, exactly (as F16C's vcvtph2ps converts them): the instruction where
 * the level has it (every x86 level but generic), a key scored alone (a tree's scattered rows,
 * attention.c) spent most of its time in the bits below. */
#if defined(__F16C__) && defined(HAVE_AVX2) /* immintrin.h is in */
static inline float from_half(f16 value) { return _cvtsh_ss(value); }
#else
static inline float from_half(f16 value) {
    const uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
    uint32_t exponent = (value >> 10) & 0x1fu, mantissa = value & 0x3ffu, bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13); /* inf or NaN */
    } else if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exponent = 113;
            while (!(mantissa & 0x400u)) {
                mantissa <<= 1;
                exponent--;
            }
            bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
#endif

/* float32 to float16 bits, rounded to nearest even as F16C's vcvtps2ph rounds (a key's bits are
 * the same at every level): beyond 65504 inf, below 2^-14 subnormal, a NaN kept quiet. */
static inline f16 to_half(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    const uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (f16)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    if (magnitude >= 0x477ff000u) return (f16)(sign | 0x7c00u); /* rounds past 65504 */
    uint32_t kept, rest, tie;
    if (magnitude >= 0x38800000u) { /* normal: exponent rebased, 13 mantissa bits dropped */
        kept = (((magnitude >> 23) - 112) << 10) | ((magnitude >> 13) & 0x3ffu);
        rest = magnitude & 0x1fffu, tie = 0x1000u;
    } else { /* subnormal: the whole significand in units of 2^-24 */
        const uint32_t shift = 126 - (magnitude >> 23);
        if (shift > 24) return (f16)sign;
        const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
        kept = significand >> shift;
        rest = significand & ((1u << shift) - 1), tie = 1u << (shift - 1);
    }
    kept += rest > tie || (rest == tie && (kept & 1u)); /* a carry moves into the exponent */
    return (f16)(sign | kept);
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

static inline void store_result(void *out, int out_is_bf16, int64_t index, float value) {
    if (out_is_bf16)
        ((bf16 *)out)[index] = to_bf16(value);
    else
        ((float *)out)[index] = value;
}

#if defined(HAVE_AVX2)
#include "vec.h"
#endif

#endif
