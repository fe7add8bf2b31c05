"""The FP16-accumulate convolution: a tensor-core kernel whose accumulators are FP16 (HMMA with a half C/D).

Numerically different from the default FP16 tactics (FP32 accumulation), on purpose a tactic of its own so that the
plan and a replay record which one ran. The reduction dimension K = (input channel, kernel row, kernel column) of a
group, in that order (OIHW weights flattened), is cut into blocks of ACC_BLOCK = 16 (one m16n8k16 HMMA step):
each block's products are summed in float32 (products of FP16 values are exact there), added to the running sum,
and the running sum is rounded to FP16 after every block. The epilogue (bias, post-ops) then runs in float32 on the
FP16 sum, and the output is rounded to FP16 once more when stored.
"""
from __future__ import annotations

import itertools

import numpy as np

from native import numerics
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry, pad_input, tap_slices
from native.cpu.kernels.conv.weights import kernel_and_bias, kernel_spatial
from native.tactics import Tactic, register_tactic

ACC_BLOCK = 16


def blocked_fp16_matmul(w, cols, block=ACC_BLOCK):
    """w [..., M, K] @ cols [..., K, P] with the running sum rounded to FP16 after every `block` of K."""
    k = w.shape[-1]
    acc = None
    for b in range(0, k, block):
        part = np.matmul(w[..., b:b + block], cols[..., b:b + block, :])
        acc = part if acc is None else acc + part
        acc = numerics.round_fp16(acc)
    return acc


@register_tactic
class Im2colGemmFp16Acc(Tactic):
    """im2col, then a GEMM with FP16 accumulation in blocks of 16 along K."""
    kind, name = "Convolution", "im2col-gemm-fp16acc"
    precisions = ("float16",)
    own_precisions = True
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        if op.precision != "float16":
            return "FP16 accumulation is an FP16 tactic"
        if op.params.get("side") or op.params.get("integer"):
            return "merged shortcut / integer convolution: use the FP32-accumulate tactics"
        return None

    def run(self, op, inputs):
        x = np.asarray(inputs[0], np.float32)
        w, b = kernel_and_bias(op, inputs)
        w = np.asarray(w, np.float32)
        ks = kernel_spatial(op, w)
        g = op.params.get("groups", 1) or 1
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        xp = pad_input(x, pre, post)
        n, c = x.shape[:2]
        ntaps = int(np.prod(ks))
        cols = np.empty((n, c, ntaps) + tuple(out), dtype=np.float32)
        for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
            cols[:, :, t] = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
        m = w.shape[0]
        p = int(np.prod(out))
        cols = cols.reshape(n, g, (c // g) * ntaps, p)
        wm = w.reshape(g, m // g, (c // g) * ntaps)
        y = blocked_fp16_matmul(wm, cols).reshape((n, m) + tuple(out))
        return finish(op, y, b, inputs, np.float32)
