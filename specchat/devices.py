"""Where a model runs when the user names no device: `--device auto`, the default.

A GPU is used where the runtime that would run the model sees one (llama.cpp: a CUDA build that
found a device; transformers: a CUDA torch that did), else the CPU. The int4 runtime is CPU-only,
so a GGUF on a machine with a GPU goes to llama.cpp's CUDA build when there is one, and to the
CPU's fastest runtime when there is none. The question is asked only where a GPU's device file
exists: on the many machines without one, nothing is imported to find that out.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Protocol


class Placeable(Protocol):
    """A runtime as `pick` reads it (`backends/registry.py`'s `Runtime`)."""

    def sees_gpu(self) -> bool: ...


AUTO, CPU, CUDA = "auto", "cpu", "cuda"
DEVICES = (AUTO, CPU, CUDA)


def gpu_present() -> bool:
    """A GPU's device file or driver entry is here (NVIDIA's, or WSL's GPU bridge): worth asking
    the runtimes."""
    return (
        bool(glob.glob("/dev/nvidia[0-9]*"))
        or os.path.isdir("/proc/driver/nvidia/gpus")
        or os.path.exists("/dev/dxg")
    )


def pick(device: str, runtimes: Sequence[Placeable]) -> str:
    """`device` as asked, or for `auto` CUDA where one of `runtimes` (those that could run the
    model) sees a GPU, else the CPU."""
    if device != AUTO:
        return device
    if gpu_present() and any(r.sees_gpu() for r in runtimes):
        return CUDA
    return CPU
