"""Run as a process (`python -m tests.backends.block_widths MODEL.gguf`): blocks of several widths
on llama.cpp, on two threads, against the same tokens one by one; exits non-zero naming the first
width whose logits differ. A process of its own, so the test can choose the kernel the patched
ggml dispatches to (`SPECCHAT_GGML_NO_AVX512=1` takes the AVX2 one), which it picks once."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# under, at and past the kernel's 8 tokens a call, odd and even; and past the 32 tokens a pass
# splits by thread (above it, ggml's own chunks)
WIDTHS = (2, 3, 5, 8, 9, 11, 40)


def differing_width(path: Path) -> int | None:
    """The first block width whose logits are not bitwise the one-by-one logits, or None."""
    from specchat.backends.base import Block
    from specchat.backends.llama import LlamaBackend

    backend = LlamaBackend(path, n_ctx=512, threads=2)
    try:
        ids = backend.tokenize(
            "A block of tokens is verified in one pass, one token at a time " * 5
        )
        backend.prefill(ids[:12])
        start = backend.n_committed
        rest = ids[12 : 12 + max(WIDTHS)]
        alone = []
        for token in rest:
            alone.append(backend.evaluate(Block.chain([token]))[0].copy())
            backend.commit([0])
        for width in WIDTHS:
            backend.rollback(start)
            if not np.array_equal(
                backend.evaluate(Block.chain(rest[:width])), np.stack(alone[:width])
            ):
                return width
        return None
    finally:
        backend.close()


if __name__ == "__main__":
    width = differing_width(Path(sys.argv[1]))
    if width is not None:
        sys.exit(f"a block of {width} tokens differs from the tokens one by one")
    print("bitwise")
