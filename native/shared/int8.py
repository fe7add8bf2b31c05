"""INT8 parameters both devices compute the same way: the layer's INT8 params, per-channel weight scales, the
quantized weights and int32 bias, and which post-ops fold into the int32 accumulator as biases."""
from __future__ import annotations

import numpy as np

from native import numerics


def leading_biases(op):
    """The post-ops that are per-column biases ahead of everything else (folded into the int32 accumulator)."""
    post = list(op.params.get("post_ops") or ())
    n = 0
    while n < len(post) and post[n]["op"] == "bias" and post[n].get("axis", -1) in (-1,):
        n += 1
    return post[:n], post[n:]


def int8_params(op) -> dict:
    return op.params.get("int8") or {}


def gemm_reason(op) -> str | None:
    """Why an INT8 GEMM (constant right operand) cannot run this layer on any device, or None."""
    if "input_scale" not in int8_params(op):
        return "no INT8 input scale (params['int8'])"
    b = op.weights.get("b", op.weights.get("b_q"))
    if b is None or b.ndim != 2:
        return "right operand is not a constant 2-D weight"
    if op.params.get("transpose_a"):
        return "transposed left operand"
    return None


def conv_reason(op) -> str | None:
    """Why an INT8 convolution (constant kernel) cannot run this layer on any device, or None."""
    if "input_scale" not in int8_params(op):
        return "no INT8 input scale (params['int8'])"
    if op.weights.get("kernel", op.weights.get("kernel_q")) is None:
        return "kernel is not a constant weight"
    return None


def weight_scales(w, axis=0):
    """Per-channel symmetric scales along `axis`: max|w| / 127 (channels that are all zero get scale 1)."""
    w = np.asarray(w, np.float32)
    other = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    amax = np.max(np.abs(w), axis=other) if w.size else np.zeros(w.shape[axis], np.float32)
    return np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)


def quantize_weights(w, scale, axis, narrow, rounding="half_even"):
    """(w_q int8, s_w float32): the model's per-channel scale where given (explicit), else max|w|/127 (implicit)."""
    s = weight_scales(w, axis) if scale is None else np.asarray(scale, np.float32).reshape(-1)
    if s.size == 1 and np.shape(w)[axis] != 1:
        s = np.full(np.shape(w)[axis], s.reshape(()), np.float32)
    return numerics.quantize(w, s, axis=axis, rounding=rounding, narrow=narrow), s


def quantize_bias(bias, s_x, s_w):
    """bias / (s_x * s_w) rounded (half to even) into int32, as INT8 kernels add it to the accumulator."""
    if bias is None:
        return None
    b = np.asarray(bias, np.float64) / (np.float64(np.float32(s_x)) * np.asarray(s_w, np.float64))
    return np.clip(np.rint(b), -2**31, 2**31 - 1).astype(np.int32)
