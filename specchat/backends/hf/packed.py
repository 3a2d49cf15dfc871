"""Linear layers with oneDNN-prepacked weights, for float32 models on the CPU.

Speculative decoding lives on what a pass of k tokens costs against a pass of one. With stock
`nn.Linear` (MKL's sgemm, which packs its operands anew on every call) a second row nearly doubles
a pass of the linear layers; with the weights reordered once into oneDNN's blocked layout
(benchmarks/measure_packed_linear.py, figures in docs/bench-log.md) a single token gets faster
and a drafted one almost free. A row's result is the same, bit for bit, whatever
the number of rows in the call, so a block agrees with one-token passes as closely as before.

The original weights stay in place (tied embeddings read them, and `stock_linears` gives the
library's own code paths — the bench's transformers peers — the model exactly as transformers
runs it); the packed copy is extra memory, so packing is skipped where it would not fit easily.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

_PACKED = "_specchat_packed"  # the attribute a packed Linear keeps its reordered weight in
_MEMORY_SHARE = 0.5  # pack only while the copy takes at most this share of available memory


def _available_bytes() -> int:
    """Memory available without swapping: Linux's MemAvailable (free pages plus the page cache
    it can drop; free pages alone are often small on a busy machine), else the free pages."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def can_pack(model: Any) -> bool:
    """Whether `model` runs in float32 on the CPU where oneDNN is built in, with room for the
    packed copy of its linear weights."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return False
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if not linears:
        return False
    weight = linears[0].weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return False
    extra = sum(m.weight.numel() * 4 for m in linears if not hasattr(m, _PACKED))
    return extra <= _MEMORY_SHARE * _available_bytes()


def pack_linears(model: Any) -> bool:
    """Give every `nn.Linear` of a float32 CPU model a prepacked weight and a forward that uses
    it; True if the model runs packed (already, or now). Idempotent."""
    import torch

    if not can_pack(model):
        return any(hasattr(m, _PACKED) for m in model.modules())
    todo = [m for m in model.modules() if type(m) is torch.nn.Linear and not hasattr(m, _PACKED)]
    try:
        with torch.inference_mode():
            packed = [torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()) for m in todo]
    except (RuntimeError, AttributeError):  # a oneDNN build without this reorder: run stock
        return False
    for module, weight in zip(todo, packed):
        setattr(module, _PACKED, weight)
        module.forward = _packed_forward(module, weight)
    return True


def _packed_forward(module: Any, packed: Any):
    import torch

    linear = torch.ops.mkldnn._linear_pointwise
    bias = module.bias

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu" or torch.is_grad_enabled():
            return torch.nn.functional.linear(x, module.weight, bias)
        return linear(x, packed, None if bias is None else bias.detach(), "none", [], "")

    return forward


@contextlib.contextmanager
def stock_linears(model: Any) -> Iterator[None]:
    """Run `model` with transformers' own `nn.Linear.forward` for the duration."""
    saved = {}
    for module in model.modules():
        if hasattr(module, _PACKED) and "forward" in vars(module):
            saved[module] = module.forward
            del module.forward
    try:
        yield
    finally:
        for module, forward in saved.items():
            module.forward = forward
