"""What the machine offers the model runtimes, read once where every runtime and screen can ask."""

from __future__ import annotations

import os


def physical_cores() -> int:
    """Physical cores, the thread count at which llama.cpp and torch decode fastest on CPU."""
    try:
        cores = set()
        with open("/proc/cpuinfo") as f:
            physical = core = None
            for line in f:
                if line.startswith("physical id"):
                    physical = line.split(":")[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":")[1].strip()
                    cores.add((physical, core))
        if cores:
            return len(cores)
    except OSError:
        pass
    return max(1, (os.cpu_count() or 2) // 2)


def usable_threads(asked: int) -> int:
    """`asked`, but no more than the machine's logical CPUs: threads beyond them only wait on
    each other at every barrier (on 2 CPUs, `ask --threads 4` took 19 s for 8 tokens and
    `--threads 999` never finished)."""
    return max(1, min(asked, os.cpu_count() or asked))
