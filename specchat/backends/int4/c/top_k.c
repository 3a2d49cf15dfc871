/* Each row's likeliest tokens, for the recycled candidates. */
#include "kernels.h"

/* The indices of each row's k largest values, largest first (ties: the lower index first; a NaN
 * is never taken; a row with fewer than k numbers is padded with -1). One pass over the row: a
 * chunk of 64 none of whose values can enter the current k is skipped whole after one vectorised
 * comparison, so a row of logits costs about one streaming pass (numpy's argpartition, which
 * sorts a partition of every row, cost several times as much). Token recycling keeps every
 * evaluated token's likeliest successors from the logits a pass computed anyway. */
void top_k_rows(const float *logits, int64_t rows, int64_t vocab, int32_t k, int32_t *out) {
    if (k > 64) k = 64;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = logits + r * vocab;
        float best[64];
        int32_t index[64];
        int32_t n = 0;
        for (int64_t start = 0; start < vocab; start += 4 * LANES) {
            int64_t end = start + 4 * LANES < vocab ? start + 4 * LANES : vocab;
            if (n == k) { /* an OR of comparisons: vectorised, unlike a float max */
                const float worst = best[k - 1];
                int any = 0;
                for (int64_t i = start; i < end; i++) any |= row[i] > worst;
                if (!any) continue;
            }
            for (int64_t i = start; i < end; i++) {
                float value = row[i];
                if (value != value || (n == k && !(value > best[k - 1]))) continue;
                int32_t at = n < k ? n++ : k - 1;
                while (at > 0 && value > best[at - 1]) {
                    best[at] = best[at - 1];
                    index[at] = index[at - 1];
                    at--;
                }
                best[at] = value;
                index[at] = (int32_t)i;
            }
        }
        for (int32_t j = 0; j < k; j++) out[r * k + j] = j < n ? index[j] : -1;
    }
}
