"""CPU kernels: INT8 global average pooling (a Q/DQ "quantizable layer": DQ -> GlobalAveragePool -> Q).

The INT8 input is summed exactly in integers and the sum requantized once, straight to the output scale:
    y_q = round(sum(x_q) * float32(s_x / (s_y * N)))      (N = pooled elements; the device's rounding)
which is what an INT8 pooling kernel computes (and what ONNX Runtime's QLinearGlobalAveragePool computes), rather
than an FP32 mean followed by a quantization, whose float rounding lands ties on the other side now and then.
"""
from __future__ import annotations

import numpy as np

from native import numerics
from native.cpu.kernels.conv_int8 import int8_params
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
