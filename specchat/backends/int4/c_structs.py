"""The model as exact_kernels.c's `forward` reads it: ctypes mirrors of its C structures,
pointing into the model's own arrays."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from specchat.backends.int4.linear import RowsLinear

if TYPE_CHECKING:
    from specchat.backends.int4.model import Int4Model


class HeadOps(ctypes.Structure):
    """exact_kernels.c's head_ops: what a family does to q and k before the cache."""

    _fields_ = [
        ("bias", ctypes.c_void_p), ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p),
        ("eps", ctypes.c_float), ("neox", ctypes.c_int32),
    ]  # fmt: skip


# -- the whole forward in C ------------------------------------------------------------------------


class _Linear(ctypes.Structure):
    _fields_ = [
        ("f32", ctypes.c_void_p), ("codes", ctypes.c_void_p), ("scales", ctypes.c_void_p),
        ("zeros", ctypes.c_void_p), ("group", ctypes.c_int32), ("code_bits", ctypes.c_int32),
        ("half_scales", ctypes.c_int32), ("int8_x", ctypes.c_int32), ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
    ]  # fmt: skip


class _Layer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p),
        ("qkv", _Linear * 3), ("qkv_parts", ctypes.c_int32), ("output", _Linear),
        ("gate_up", _Linear * 2), ("gate_up_parts", ctypes.c_int32), ("down", _Linear),
        ("ops", HeadOps),
    ]  # fmt: skip


class _Model(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_int32), ("dim", ctypes.c_int32), ("ffn", ctypes.c_int32),
        ("heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("eps", ctypes.c_float), ("scale", ctypes.c_float), ("layer", ctypes.POINTER(_Layer)),
        ("final_norm", ctypes.c_void_p), ("head", _Linear), ("cos_table", ctypes.c_void_p),
        ("sin_table", ctypes.c_void_p), ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p),
        ("slots", ctypes.c_int64),
    ]  # fmt: skip


def _linear_weights(linear: RowsLinear) -> _Linear:
    return _Linear(
        RowsLinear._pointer(linear.f32), RowsLinear._pointer(linear.codes),
        RowsLinear._pointer(linear.scales), RowsLinear._pointer(linear.zeros), linear.group,
        linear.code_bits, linear.half_scales, linear.int8_x, linear.out_features,
        linear.in_features,
    )  # fmt: skip


def whole_model(model: Int4Model) -> _Model:
    """The model as exact_kernels.c's `forward` reads it. The structure points into the model's
    own arrays, which live as long as it does."""
    shape = model.shape
    layers = (_Layer * shape.layers)()
    for index, layer in enumerate(model.layers):
        target = layers[index]
        target.attn_norm, target.ffn_norm = layer.attn_norm.data_ptr(), layer.ffn_norm.data_ptr()
        target.qkv_parts, target.gate_up_parts = len(layer.qkv.linears), len(layer.gate_up.linears)
        for part, linear in enumerate(layer.qkv.linears):
            target.qkv[part] = _linear_weights(linear)
        for part, linear in enumerate(layer.gate_up.linears):
            target.gate_up[part] = _linear_weights(linear)
        target.output, target.down = _linear_weights(layer.output), _linear_weights(layer.down)
        target.ops = layer.ops
    whole = _Model(
        shape.layers, shape.dim, shape.ffn, shape.heads, shape.kv_heads, shape.head_dim,
        shape.norm_eps, model._scale, layers, model.final_norm.data_ptr(),
        _linear_weights(model.head), model.cos.data_ptr(), model.sin.data_ptr(),
        model.k_cache.data_ptr(), model.v_cache.data_ptr(), model.slots,
    )  # fmt: skip
    whole._keep = layers  # the array the pointer points into
    return whole
