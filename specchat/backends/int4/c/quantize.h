/* Activations rounded to 8 bits, as the 4-bit and int8 weight formats multiply them.
 *
 * Below AVX-512 a weight is cheapest multiplied as llama.cpp does it: each x row rounded to int8
 * per group of 32 with one scale (scale = max |x| / 127), and each group's dot product summed in
 * integers (32 byte products in one instruction, exact and in any order), then scaled. */
#ifndef SPECCHAT_QUANTIZE_H
#define SPECCHAT_QUANTIZE_H

#include "base.h"

#define QGROUP 32

typedef struct {
    int8_t *codes;  /* [m][cols] */
    float *scales;  /* [m][padded]: the x scale per group */
    float *sums;    /* [m][padded]: x scale * the group's integer sum */
    int32_t *isums; /* [m][padded]: the group's integer sum */
    int32_t *lows;  /* [m][padded]: the integer sum of the group's first 16 codes, where asked */
    int64_t padded; /* groups rounded up to a multiple of 8 (zeros beyond) */
} int8_rows;

/* x rounded in two steps, so that a matmul may round it inside its own parallel region: the
 * arrays (`halves`: also each group's first-half sum, which int8 weights in groups of 16 need),
 * then the groups (an `omp for`, shared by the region's threads where one encloses it; a group's
 * result is the same whichever thread rounds it). x is float32, or bf16 (`x_is_bf16`) widened
 * a group at a time (exactly): a layer's bf16 rows are then never widened whole by one thread
 * while the others wait, 4% of a drafted row's time (docs/bench-log.md, session 55). */
void alloc_int8_rows(int64_t m, int64_t cols, int halves, int8_rows *q);
void quantize_groups(const void *x, int x_is_bf16, int64_t m, int64_t cols, int halves,
                     int8_rows *q);
/* Whether a matmul rounds its m rows of x inside its parallel region: with more than one thread
 * and two rows or more (a lone row's 18-48 groups are left to one thread: too little to share). */
#define SHARED_ROUNDING(m, threads) ((threads) > 1 && (m) >= 2)
void free_int8_rows(int8_rows *q);

#endif
