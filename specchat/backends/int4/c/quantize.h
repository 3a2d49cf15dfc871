/* Activations rounded to 8 bits, as the 4-bit and int8 weight formats multiply them.
 *
 * Below AVX-512 a weight is cheapest multiplied as llama.cpp does it: each x row rounded to int8
 * per group of 32 with one scale (scale = max |x| / 127), and each group's dot product summed in
 * integers (32 byte products in one instruction, exact and in any order), then scaled. */
#ifndef SPECCHAT_QUANTIZE_H
#define SPECCHAT_QUANTIZE_H

#include "base.h"

#define QGROUP 32
#if defined(HAVE_VNNI512)
/* tokens a vector tile takes at once: their sums stay in registers (AVX-512 has 32 of them: a
 * pair of blocks' weights unpacked once for 8 tokens; 4 at a time made k = 8 0.91-0.94x of the
 * eight-row tiles', 8 0.80-0.84x, in one process) */
#define TOKENS 8
#else
#define TOKENS 4
#endif
/* whether x is laid in tiles of TOKENS (below): every vector tile reads it so; the plain C
 * takes one token at a time, row after row */
#if defined(HAVE_AVX2)
#define TILED_X 1
#else
#define TILED_X 0
#endif

typedef struct {
    int8_t *codes;  /* [m][cols], or tiled (below) */
    float *scales;  /* [m][padded]: the x scale per group */
    float *sums;    /* [m][padded]: x scale * the group's integer sum */
    int32_t *isums; /* [m][padded]: the group's integer sum */
    int32_t *lows;  /* [m][padded]: the integer sum of the group's first 16 codes, where asked */
    int64_t padded; /* groups rounded up to a multiple of 8 (zeros beyond) */
    int64_t m, cols;
} int8_rows;

/* A vector tile of several tokens reads them laid group by group: the rows of a tile of TOKENS
 * tokens (rows t .. t + count - 1, t a multiple of TOKENS, count fewer only at the end) lie from
 * t * cols on as [group][token][32] codes, and from t * padded on as [group][token] scales and
 * sums, so that one pointer a group finds every token's bytes and scales at constant offsets (row
 * after row, each token's addresses were their own registers, spilled at four tokens and
 * reloaded for every broadcast). The same values, elsewhere: the same sums. */
typedef struct {
    int8_t *codes;          /* row r's group g: codes + QGROUP * g * step */
    float *scales, *sums;   /* ... scales[g * step] */
    int32_t *isums, *lows;  /* ... isums[g * step]; lows NULL where not asked */
    int64_t step;           /* rows of r's tile: count, or 1 row after row */
} x_rows;

/* The tile that row r starts, of `count` rows (r a multiple of TOKENS where TILED_X). */
static inline x_rows x_tile_at(const int8_rows *q, int64_t r, int64_t count) {
    const int64_t at = r * q->padded;
    return (x_rows){q->codes + r * q->cols, q->scales + at, q->sums + at, q->isums + at,
                    q->lows ? q->lows + at : NULL, count};
}

/* Where row r's groups lie, wherever in its tile (row r + j of a tile: j * QGROUP and j
 * further). */
static inline x_rows x_rows_at(const int8_rows *q, int64_t r) {
    if (!TILED_X) return x_tile_at(q, r, 1);
    const int64_t first = r - r % TOKENS, in = r - first; /* a constant power of two: a mask */
    const x_rows tile = x_tile_at(q, first, q->m - first < TOKENS ? q->m - first : TOKENS);
    return (x_rows){tile.codes + in * QGROUP, tile.scales + in, tile.sums + in, tile.isums + in,
                    tile.lows ? tile.lows + in : NULL, tile.step};
}

/* x rounded in two steps, so that a matmul may round it inside its own parallel region: the
 * arrays (`halves`: also each group's first-half sum, which int8 weights in groups of 16 need),
 * then the groups, each where x_rows_at puts it (an `omp for`, shared by the region's threads
 * where one encloses it; a group's result is the same whichever thread rounds it). x is float32,
 * or bf16 (`x_is_bf16`) widened a group at a time (exactly): a layer's bf16 rows are then never
 * widened whole by one thread while the others wait, 4% of a drafted row's time
 * (docs/bench-log.md, session 55). */
void alloc_int8_rows(int64_t m, int64_t cols, int halves, int8_rows *q);
void quantize_groups(const void *x, int x_is_bf16, int64_t m, int64_t cols, int halves,
                     int8_rows *q);
/* Whether a matmul rounds its m rows of x inside its parallel region: with more than one thread
 * and two rows or more (a lone row's 18-48 groups are left to one thread: too little to share). */
#define SHARED_ROUNDING(m, threads) ((threads) > 1 && (m) >= 2)
void free_int8_rows(int8_rows *q);

#endif
