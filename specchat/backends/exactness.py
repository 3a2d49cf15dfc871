"""Whether a block's logits equal one-token passes' on this model and runtime: measured, not
assumed.

Speculation is exact when verifying a draft in one pass gives each drafted position the logits
plain greedy would have computed for it alone. On the batch-invariant llama.cpp build that holds
bitwise for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and F16 weights but not for K-quants (Q4_K, Q6_K, …),
whose batched kernels sum in another order; on transformers in float32 rows agree to rounding.
Where it does not hold bitwise, a greedy-family decoder still follows greedy except at near-ties
(two top logits closer than `max_difference`), and specchat says so. The probe evaluates a few
tokens behind a short context both ways; its result is kept with the pass costs.
"""

from __future__ import annotations

import numpy as np

from specchat.backends.base import Block, Exactness

PROBE_TEXT = "The quick brown fox jumps over the lazy dog, and then it naps in the warm sun. " * 3
PROBE_BLOCK = 8  # tokens evaluated as one block and one by one


def probe_exactness(backend) -> Exactness:
    """Evaluate PROBE_BLOCK tokens behind a context as one chain, then one by one; compare.
    Leaves the backend's cache as it found it."""
    committed = backend.n_committed
    ids = backend.tokenize(PROBE_TEXT)
    room = max(0, backend.n_ctx - committed - 1)
    ids = ids[: min(len(ids), room)]
    context, block = ids[:-PROBE_BLOCK], ids[-PROBE_BLOCK:]
    try:
        backend.prefill(context)
        start = backend.n_committed
        together = backend.evaluate(Block.chain(block))
        backend.rollback(start)
        alone = []
        for token in block:
            alone.append(backend.evaluate(Block.chain([token]))[0])
            backend.commit([0])
    finally:
        backend.rollback(committed)
    difference = float(np.max(np.abs(together - np.stack(alone)))) if block else 0.0
    return Exactness(difference == 0.0, difference)
