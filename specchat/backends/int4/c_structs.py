"""The model as the C `forward` (c/forward.c) reads it: ctypes mirrors of its C structures,
pointing into the model's own arrays."""

from __future__ import annotations

import ctypes

from specchat.backends.int4.linear import RowsLinear


class HeadOps(ctypes.Structure):
    """c/kernels.h's head_ops: what a family does to q and k before the cache."""

    _fields_ = [
        ("bias", ctypes.c_void_p), ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p),
        ("eps", ctypes.c_float), ("neox", ctypes.c_int32),
    ]  # fmt: skip


# -- the whole forward in C ------------------------------------------------------------------------


class CLinear(ctypes.Structure):
    _fields_ = [
        ("f32", ctypes.c_void_p), ("codes", ctypes.c_void_p), ("scales", ctypes.c_void_p),
        ("zeros", ctypes.c_void_p), ("group", ctypes.c_int32), ("code_bits", ctypes.c_int32),
        ("scale_form", ctypes.c_int32), ("int8_x", ctypes.c_int32), ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
    ]  # fmt: skip


class CLayer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p),
        ("attn_post_norm", ctypes.c_void_p), ("ffn_post_norm", ctypes.c_void_p),
        ("cos_table", ctypes.c_void_p), ("sin_table", ctypes.c_void_p), ("window", ctypes.c_int32),
        ("qkv", CLinear * 3), ("qkv_parts", ctypes.c_int32), ("output", CLinear),
        ("gate_up", CLinear * 2), ("gate_up_parts", ctypes.c_int32), ("down", CLinear),
        ("ops", HeadOps),
    ]  # fmt: skip


class CModel(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_int32), ("dim", ctypes.c_int32), ("ffn", ctypes.c_int32),
        ("heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("eps", ctypes.c_float), ("scale", ctypes.c_float), ("softcap", ctypes.c_float),
        ("gelu", ctypes.c_int32),
        ("layer", ctypes.POINTER(CLayer)), ("final_norm", ctypes.c_void_p), ("head", CLinear),
        ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p), ("slots", ctypes.c_int64),
    ]  # fmt: skip


class CDraftHead(ctypes.Structure):
    """c/draft_head.c's draft_head."""

    _fields_ = [
        ("inner", CLinear), ("outer", CLinear), ("rows", CLinear), ("inner_bias", ctypes.c_void_p),
        ("outer_bias", ctypes.c_void_p), ("shortlist", ctypes.c_void_p),
    ]  # fmt: skip


def linear_weights(linear: RowsLinear) -> CLinear:
    return CLinear(
        RowsLinear._pointer(linear.f32), RowsLinear._pointer(linear.codes),
        RowsLinear._pointer(linear.scales), RowsLinear._pointer(linear.zeros), linear.group,
        linear.code_bits, linear.scale_form, linear.int8_x, linear.out_features,
        linear.in_features,
    )  # fmt: skip


class CPassGuesses(ctypes.Structure):
    """c/kernels.h's pass_guesses: a draft head riding a pass."""

    _fields_ = [
        ("head", ctypes.c_void_p), ("embedding", ctypes.c_void_p), ("next", ctypes.c_void_p),
        ("tokens", ctypes.c_void_p), ("guesses", ctypes.c_void_p), ("sure", ctypes.c_void_p),
    ]  # fmt: skip
