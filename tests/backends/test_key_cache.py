"""The int4 runtime keeps its keys in float16, as llama.cpp does (half the bytes a pass reads of
float32 keys): each key rounded to nearest even, as numpy and F16C round, at every level."""

from __future__ import annotations

import numpy as np
import pytest

from specchat import cpu
from specchat.backends.int4.kernels import kernels

LEVELS_HERE = cpu.levels_here()


def values_to_round() -> np.ndarray:
    """Keys of every kind: random magnitudes over float16's range and past it, exact ties
    between neighbouring halves (the even one wins), subnormals, the edges of the range."""
    rng = np.random.default_rng(3)
    spread = rng.standard_normal(20_000) * np.exp2(rng.uniform(-30, 18, 20_000))
    halves = rng.integers(0, 0x7BFF, 5_000, dtype=np.uint16).view(np.float16).astype(np.float64)
    above = np.nextafter(halves.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    ties = (halves + above) / 2  # exactly halfway: representable in float32
    edges = [0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6, 2.0**-14, 2.0**-24,
             2.0**-25, 3 * 2.0**-26, 2.0**-26, 6e-8, np.inf, -np.inf]  # fmt: skip
    return np.concatenate([spread, ties, -ties, edges]).astype(np.float32)


@pytest.mark.parametrize("level", LEVELS_HERE)
def test_keys_round_to_float16_as_numpy_rounds(level: str) -> None:
    values = values_to_round()
    out = np.zeros(len(values), dtype=np.uint16)
    kernels(level).halves_of(values.ctypes.data, len(values), out.ctypes.data)
    with np.errstate(over="ignore"):  # past 65504 numpy rounds to inf, as it should
        expected = values.astype(np.float16)
    assert np.array_equal(out, expected.view(np.uint16))


def test_a_nan_key_stays_a_nan() -> None:
    values = np.array([np.nan, -np.nan], dtype=np.float32)
    out = np.zeros(2, dtype=np.uint16)
    kernels().halves_of(values.ctypes.data, 2, out.ctypes.data)
    assert np.isnan(out.view(np.float16)).all()
