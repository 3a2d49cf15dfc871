"""Our greedy (bare backend loop and the full engine) vs llama-cpp-python's own Llama.generate,
on the same model and prompt, interleaved, medians of 5:

    .venv/bin/python benchmarks/compare_greedy_loops.py
"""

import statistics
import time

import numpy as np
from llama_cpp import Llama

from specchat.backends.base import Block, ChatMessage
from specchat.backends.llama import LlamaBackend
from specchat.decoding.sampling import SamplingParams
from specchat.evaluation.race import run_decoder
from specchat.models import bundled_gguf
from specchat.prompting import chat_prompt_ids

p = str(bundled_gguf())
b4 = LlamaBackend(p, max_branches=4)
b1 = LlamaBackend(p, max_branches=1)
lib = Llama(p, n_ctx=4096, n_threads=2, n_threads_batch=2, flash_attn=False, verbose=False)
ids = chat_prompt_ids(
    b4, [ChatMessage("user", "Tell me a long story about a dragon and a knight.")]
)
N = 128


def raw_loop(b):
    b.rollback(0)
    b.prefill(ids[:-1])
    ctx = list(ids)
    t = time.perf_counter()
    for _ in range(N):
        lg = b.evaluate(Block.chain([ctx[-1]]))
        b.commit([0])
        ctx.append(int(np.argmax(lg[0])))
    return N / (time.perf_counter() - t)


def engine(b):
    d = run_decoder(b, "greedy", {}, ids, N, SamplingParams())
    return d.stats.tokens_per_second


def library():
    lib.reset()
    n = 0
    first = None
    for _tok in lib.generate(ids, top_k=1, temp=0.0, reset=True):
        if first is None:
            first = time.perf_counter()
        n += 1
        if n >= N:
            break
    return (n - 1) / (time.perf_counter() - first)


res = {k: [] for k in ["raw4", "raw1", "eng4", "eng1", "lib"]}
for _r in range(5):
    res["raw4"].append(raw_loop(b4))
    res["raw1"].append(raw_loop(b1))
    res["eng4"].append(engine(b4))
    res["eng1"].append(engine(b1))
    res["lib"].append(library())
labels = {
    "raw4": "our llama backend, bare evaluate/commit loop (4 KV streams)",
    "raw1": "our llama backend, bare loop (1 KV stream)",
    "eng4": "our engine (what specchat ask runs), 4 streams",
    "eng1": "our engine, 1 stream",
    "lib": "llama-cpp-python Llama.generate",
}
for k, v in res.items():
    print(f"{labels[k]:<62} {statistics.median(v):6.1f} tok/s  runs {[round(x) for x in v]}")
print(f"engine / library: {statistics.median(res['eng4']) / statistics.median(res['lib']):.3f}")
