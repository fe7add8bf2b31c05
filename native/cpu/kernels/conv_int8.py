"""CPU kernels: INT8 convolution, the numerics of a GPU's INT8 tensor-core kernels reproduced exactly.

A layer the builder put in INT8 (node.precision == "int8") carries params["int8"]:
    {"input_scale": s_x, "output_scale": s_y or None, "rounding": "half_even" | "half_away",
     "narrow_weights": bool, "weight_rounding": "half_up" | "half_away" | "half_even"}
and float weights "kernel" (+ "bias"), optionally with "kernel_scale" (per output channel, from the model's
DequantizeLinear in explicit quantization). `prepare` quantizes the weights once at build time:
    w_q[m]  = quantize(w[m], s_w[m])  with s_w[m] = max|w[m]| / 127 (implicit mode: clamp [-127, 127])
    bias_q  = round(bias / (s_x * s_w))  in int32
`run` is what the GPU kernel does:
    x_q     = quantize(x, s_x)                                 (the rounding mode of the device, clamp [-128, 127])
    acc     = sum(x_q * w_q) + bias_q                          exact int32 accumulation
    y       = float32(acc) * float32(s_x * s_w)                 (or requantize(acc, s_x*s_w/s_y) straight to INT8
                                                                 when the epilogue is at most a ReLU)
    epilogue (residual add, activation) in FP32, then y_q = quantize(y, s_y) when the output is INT8.
Tensors travel between layers as float32 arrays; an INT8 output is carried as dequantize(y_q) = y_q * s_y, which is
exact (an int8 value times a float32 scale is one rounding, and quantize(y_q * s_y, s_y) gives y_q back: the
relative error of the product, <= 2**-24, moves y_q by at most 128 * 2**-24 << 0.5), so the next INT8 layer sees
exactly the INT8 tensor a GPU would hand it, without a Reformat layer per boundary.

Exactness of the accumulation: every product x_q * w_q is an integer of magnitude <= 128 * 128 = 2**14, so a
partial sum over K products is an integer of magnitude <= K * 2**14. A binary float represents every integer up to
2**(mantissa bits + 1) exactly, and a sum of two exactly representable integers whose result is again below that
bound is computed exactly whatever the order or blocking (BLAS) and with or without FMA. So a float32 GEMM is exact
for K * 2**14 <= 2**24, i.e. K <= 1024, and a float64 GEMM for K <= 2**39; we use float32 below that bound and
float64 above it (int32 itself holds sums up to K = 2**17 = 131072; beyond that a GPU's accumulator would wrap, and
`exact_int_gemm` refuses instead of returning something no GPU computes).
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from native import numerics
from native.cpu.kernels.conv import geometry, pad_input, tap_slices
from native.cpu.kernels.fused import apply_post_ops
from native.errors import ExecutionError
from native.shared.int8 import conv_reason, int8_params, quantize_bias, quantize_weights, weight_scales  # noqa: F401
from native.tactics import Tactic, register_tactic

FLOAT32_EXACT_K = 1 << 10    # K * 2**14 <= 2**24
INT32_MAX_K = 1 << 17        # K * 2**14 <= 2**31


def exact_int_gemm(a_q, b_q, k):
    """matmul(a_q, b_q) of int8-valued arrays over a contracted length k, exactly, as int64 (see module docstring)."""
    if k > INT32_MAX_K:
        raise ExecutionError(f"INT8 GEMM over {k} products could overflow an int32 accumulator (limit {INT32_MAX_K})")
    work = np.float32 if k <= FLOAT32_EXACT_K else np.float64
    return np.matmul(a_q.astype(work), b_q.astype(work)).astype(np.int64)


def epilogue_is_relu_only(op):
    post = op.params.get("post_ops") or ()
    return all(s["op"] == "activation" and s["type"] == "RELU" for s in post) and len(post) <= 1


def finish_int8(acc, op, inputs, s_x, s_w, channel_axis):
    """The INT8 layer's output from its int32 accumulator (bias included): dequantized, epilogue in FP32,
    requantized to the output scale when the output is INT8 (see module docstring)."""
    p = int8_params(op)
    s_y, rounding = p.get("output_scale"), p.get("rounding", "half_even")
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    combined = (np.float32(s_x) * np.asarray(s_w, np.float32)).reshape(shape)
    if s_y is not None and epilogue_is_relu_only(op):
        q = numerics.requantize(acc.astype(np.int32), (combined / np.float32(s_y)).reshape(-1),
                                axis=channel_axis, rounding=rounding)
        if op.params.get("post_ops"):
            q = np.maximum(q, np.int8(0))
        return numerics.dequantize(q, s_y)
    y = acc.astype(np.float32) * combined
    y = apply_post_ops(y, op, inputs)
    if s_y is not None:
        y = numerics.dequantize(numerics.quantize(y, s_y, rounding=rounding), s_y)
    return y.astype(np.float32, copy=False)


@register_tactic
class Int8Im2colGemm(Tactic):
    """INT8 convolution (any groups / dilation / stride / padding, N-d): im2col of the quantized input, then an
    exact integer GEMM per group; per-output-channel weight scales."""
    kind, name = "Convolution", "int8-im2col-gemm"
    precisions = ("int8",)
    honours = frozenset({"post_ops"})

    def supports(self, op, input_shapes):
        return conv_reason(op)

    def prepare(self, op):
        w = dict(op.weights)
        if "kernel_q" in w:
            return w
        p = int8_params(op)
        kernel = w.pop("kernel")
        w["kernel_q"], w["kernel_scale"] = quantize_weights(kernel, w.pop("kernel_scale", None), 0,
                                                            narrow=p.get("narrow_weights", True),
                                                            rounding=p.get("weight_rounding", "half_even"))
        bias = w.pop("bias", None)
        if bias is not None:
            w["bias_q"] = quantize_bias(bias, p["input_scale"], w["kernel_scale"])
        return w

    def run(self, op, inputs):
        if "kernel_q" not in op.weights:   # the builder's timing run before prepare, constant folding
            op = dataclasses.replace(op, weights=self.prepare(op))
        p = int8_params(op)
        s_x = p["input_scale"]
        w_q, s_w, b_q = op.weights["kernel_q"], op.weights["kernel_scale"], op.weights.get("bias_q")
        x_q = numerics.quantize(inputs[0], s_x, rounding=p.get("rounding", "half_even"))
        acc = conv_int(x_q, w_q, op.params)
        if b_q is not None:
            acc += b_q.astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
        return [finish_int8(acc, op, inputs, s_x, s_w, 1)]


def conv_int(x_q, w_q, params):
    """The exact integer convolution of int8 x_q [N, C, *S] with int8 w_q [M, C/g, *k] -> int64 [N, M, *out]."""
    ks = list(w_q.shape[2:])
    g = params.get("groups", 1) or 1
    strides, dil, pre, post, out = geometry(params, x_q.shape, ks)
    xp = pad_input(x_q, pre, post)
    n, c = x_q.shape[:2]
    m = w_q.shape[0]
    ntaps = int(np.prod(ks))
    cols = np.empty((n, c, ntaps) + tuple(out), dtype=np.int8)
    for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
        cols[:, :, t] = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
    k = (c // g) * ntaps
    cols = cols.reshape(n, g, k, -1)
    acc = exact_int_gemm(w_q.reshape(g, m // g, k), cols, k)         # [n, g, m/g, p]
    return acc.reshape((n, m) + tuple(out))
