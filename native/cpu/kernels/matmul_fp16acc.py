"""The FP16-accumulate matrix multiply: a tensor-core GEMM whose accumulators are FP16 (HMMA with a half C/D).

A separate tactic from the default FP16 matmuls (FP32 accumulation), so the plan records which numerics ran. K is
cut into blocks of ACC_BLOCK = 16 (one m16n8k16 HMMA step): each block's products are summed in float32 (products of
FP16 values are exact there), added to the running sum, and the running sum is rounded to FP16 after every block.
Post-ops then run in float32 and the output is rounded to FP16 when stored. Batch dims broadcast as in np.matmul.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.fp16_accumulate import ACC_BLOCK, blocked_fp16_matmul
from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic

__all__ = ["ACC_BLOCK", "GemmFp16Acc"]


@register_tactic
class GemmFp16Acc(Tactic):
    kind, name = "MatrixMultiply", "gemm-fp16acc"
    precisions = ("float16",)
    own_precisions = True
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        return None if op.precision == "float16" else "FP16 accumulation is an FP16 tactic"

    def run(self, op, inputs):
        p = op.params
        a = np.asarray(inputs[0], np.float32)
        b = np.asarray(op.weights["b"] if "b" in op.weights else inputs[1], np.float32)
        if p.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        if p.get("transpose_b") and b.ndim >= 2:
            b = np.swapaxes(b, -1, -2)
        squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
        a = a[None, :] if squeeze_a else a
        b = b[:, None] if squeeze_b else b
        y = blocked_fp16_matmul(a, b)
        if squeeze_a:
            y = y[..., 0, :]
        if squeeze_b:
            y = y[..., 0]
        if p.get("post_ops"):
            y = apply_post_ops(y, op, inputs)
        return [y]
