"""CPU kernels: INT8 matrix multiply with a constant right operand (FullyConnected / Gemm / MatMul by weights).

The numerics are those of conv_int8 (see its docstring): the activation quantized per tensor, the weights per
output column (the N axis of [K, N], TensorRT's output channel), exact int32 accumulation, bias in int32, FP32
rescale, requantization when the output is INT8. Leading "bias" post-ops (Gemm's C, a fused Add) become the int32
bias; the rest of the epilogue runs in FP32.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from native import numerics
from native.cpu.kernels.conv_int8 import exact_int_gemm, finish_int8, int8_params, quantize_bias, quantize_weights
from native.shared.int8 import gemm_reason, leading_biases
from native.tactics import Tactic, register_tactic


@register_tactic
class Int8PackedGemm(Tactic):
    kind, name = "MatrixMultiply", "int8-gemm"
    precisions = ("int8",)
    honours = frozenset({"post_ops"})

    def supports(self, op, input_shapes):
        return gemm_reason(op)

    def prepare(self, op):
        w = dict(op.weights)
        if "b_q" in w:
            return w
        p = int8_params(op)
        b = w.pop("b")
        if op.params.get("transpose_b"):
            b = b.T
        w["b_q"], w["b_scale"] = quantize_weights(np.ascontiguousarray(b), w.pop("b_scale", None), 1,
                                                  narrow=p.get("narrow_weights", True),
                                                  rounding=p.get("weight_rounding", "half_even"))
        biases, _ = leading_biases(op)
        if biases:
            # the float biases stay (the plan names them in post_ops); run adds bias_q instead of them
            total = sum(np.asarray(w[s["weight"]], np.float64).reshape(-1) for s in biases)
            w["bias_q"] = quantize_bias(total, p["input_scale"], w["b_scale"])
        return w

    def run(self, op, inputs):
        if "b_q" not in op.weights:
            op = dataclasses.replace(op, weights=self.prepare(op))
        p = int8_params(op)
        s_x = p["input_scale"]
        b_q, s_w = op.weights["b_q"], op.weights["b_scale"]
        a = np.asarray(inputs[0])
        x_q = numerics.quantize(a, s_x, rounding=p.get("rounding", "half_even"))
        k, n = b_q.shape
        acc = exact_int_gemm(x_q.reshape(-1, k), b_q, k).reshape(a.shape[:-1] + (n,))
        if "bias_q" in op.weights:
            acc += op.weights["bias_q"].astype(np.int64)
        _, rest = leading_biases(op)
        op = dataclasses.replace(op, params={**op.params, "post_ops": rest})
        return [finish_int8(acc, op, inputs, s_x, s_w, acc.ndim - 1)]
