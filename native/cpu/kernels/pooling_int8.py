"""CPU kernels: INT8 global average pooling (a Q/DQ "quantizable layer": DQ -> GlobalAveragePool -> Q), and the max
pool between int8 NHWC tensors (passes/int8_io.py; the CUDA twin is native/cuda/tactics/pooling.py's).

The INT8 input is summed exactly in integers and the sum requantized once, straight to the output scale:
    y_q = round(sum(x_q) * float32(s_x / (s_y * N)))      (N = pooled elements; the device's rounding)
which is what an INT8 pooling kernel computes (and what ONNX Runtime's QLinearGlobalAveragePool computes), rather
than an FP32 mean followed by a quantization, whose float rounding lands ties on the other side now and then.
"""
from __future__ import annotations

import numpy as np

from native import numerics
from native.cpu.kernels.conv_int8 import int8_params
from native.cpu.kernels.fused import _pool_nhwc
from native.shared.int8_io import max_pool_refusal
from native.tactics import Tactic, register_tactic


@register_tactic
class Int8GlobalAveragePool(Tactic):
    kind, name = "Pooling", "int8-global-average"
    precisions = ("int8",)

    def supports(self, op, input_shapes):
        if not op.params.get("global") or op.params.get("type", "MAX") != "AVERAGE":
            return "only global average pooling runs in INT8"
        if "input_scale" not in int8_params(op):
            return "no INT8 input scale (params['int8'])"
        return None

    def run(self, op, inputs):
        p = int8_params(op)
        x = np.asarray(inputs[0])
        rounding = p.get("rounding", "half_even")
        axes = tuple(range(2, x.ndim))
        n = int(np.prod([x.shape[a] for a in axes]))
        acc = numerics.quantize(x, p["input_scale"], rounding=rounding).astype(np.int64).sum(axis=axes, keepdims=True)
        s_x, s_y = np.float32(p["input_scale"]), p.get("output_scale")
        if s_y is None:
            return [acc.astype(np.float32) * (s_x / np.float32(n))]
        scale = s_x / (np.float32(s_y) * np.float32(n))
        return [numerics.dequantize(numerics.requantize(acc, scale, rounding=rounding), s_y)]


@register_tactic
class Int8MaxPoolNHWC(Tactic):
    """A 2-D max pool [+ ReLU] from an int8 NHWC tensor to one of the same scale: the max of int8 values is one of
    them, so there is nothing to round."""

    kind, name = "PoolingNHWC", "int8-max-nhwc"
    precisions, formats = ("int8",), ("nhwc",)
    input_dtypes, dtype_inputs = frozenset({"int8"}), (0,)
    honours = frozenset({"post_ops"})

    def supports(self, op, input_shapes):
        return max_pool_refusal(op, input_shapes)

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        if x.dtype != np.int8:
            raise ValueError(f"the INT8 max pool reads int8, got {x.dtype}")
        y = _pool_nhwc(op, [x])[0]
        return [np.maximum(y, np.int8(0)) if op.params.get("post_ops") else np.ascontiguousarray(y)]
