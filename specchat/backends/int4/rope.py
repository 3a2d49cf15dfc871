"""RoPE's cos and sin tables as llama.cpp computes them (linear and YaRN scaling, a file's
frequency factors)."""

from __future__ import annotations

import numpy as np

from specchat.backends.int4.shape import ModelShape


def rope_tables(shape: ModelShape, positions: int, freq_factors: np.ndarray | None):
    """cos and sin [positions, head_dim / 2] of each pair's angle, computed as llama.cpp does
    (float32, the angle multiplied pair by pair by base^(-2/head_dim), divided by the file's
    frequency factors, then scaled by a linear RoPE factor), so both rotate alike."""
    half = shape.head_dim // 2
    theta_scale = np.float32(
        np.power(np.float32(shape.rope_base), np.float32(-2.0 / shape.head_dim))
    )
    theta = np.empty((positions, half), dtype=np.float32)
    theta[:, 0] = np.arange(positions, dtype=np.float32)
    for j in range(1, half):
        theta[:, j] = theta[:, j - 1] * theta_scale
    if freq_factors is not None:
        theta = theta / freq_factors.astype(np.float32)
    magnitude = np.float32(1.0)
    if shape.rope_freq_scale != 1.0:
        scale = np.float32(shape.rope_freq_scale)
        interpolated = scale * theta
        if shape.rope_scaling == "yarn":  # ggml's rope_yarn, beta_fast 32, beta_slow 1
            low, high = _yarn_corr_dims(shape, 32.0, 1.0)
            pair = np.arange(half, dtype=np.float32)
            ramp = 1 - np.clip((pair - low) / max(np.float32(0.001), high - low), 0, 1)
            mix = ramp.astype(np.float32)
            theta = interpolated * (1 - mix) + theta * mix
            magnitude = np.float32(1.0) + np.float32(0.1) * np.log(np.float32(1.0) / scale)
        else:
            theta = interpolated
    angles = theta.astype(np.float64)
    cos = np.ascontiguousarray(np.cos(angles).astype(np.float32) * magnitude)
    sin = np.ascontiguousarray(np.sin(angles).astype(np.float32) * magnitude)
    return cos, sin


def _yarn_corr_dims(shape: ModelShape, beta_fast: float, beta_slow: float):
    """The pairs YaRN leaves unscaled below and scales fully above, as ggml computes them."""
    dims, base = np.float32(shape.head_dim), np.float32(shape.rope_base)
    orig = np.float32(shape.yarn_context)

    def corr_dim(rotations: float) -> np.float32:
        two_pi = np.float32(2 * np.pi)
        return dims * np.log(orig / (np.float32(rotations) * two_pi)) / (2 * np.log(base))

    low = max(np.float32(0), np.floor(corr_dim(beta_fast)))
    high = min(dims - 1, np.ceil(corr_dim(beta_slow)))
    return np.float32(low), np.float32(high)
