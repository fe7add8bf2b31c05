"""The sliding-window tactic: a 2-D convolution that slides the kernel one row at a time. For each of the kh kernel
rows it gathers that row's kw taps of every input channel into a [C*kw, Ho*Wo] row-window matrix and does one GEMM
with the kernel row's [M, C*kw] weights; the kh partial products are added in row order.

Between im2col-gemm (one GEMM with K = C*kh*kw over a column matrix kh times larger) and shifted-gemm (kh*kw GEMMs
with K = C, stride 1 only): any stride and dilation, 1/kh of im2col's column memory, and its own rounding (partial
sums per kernel row, accumulated in the layer's precision).
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry, pad_input, tap_slices
from native.cpu.kernels.conv.weights import conv_bias, repacked, work_dtype
from native.tactics import Tactic, register_tactic


def row_weights(w):
    """[M, C, kh, kw] -> [kh, M, C*kw]: kernel row i's weights, channel-major as the row-window matrix."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.transpose(2, 0, 1, 3).reshape(w.shape[2], w.shape[0], -1))


@register_tactic
class SlidingWindow(Tactic):
    """kh GEMMs of K = C*kw over row-window matrices (see the module docstring)."""
    kind, name = "Convolution", "sliding-window"
    honours = {"post_ops", "side"}

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        if len(ks) != 2 or ks[0] < 2:
            return "2-D kernels with 2 or more rows only (a 1-row kernel is im2col-gemm)"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        n, c, h, w = input_shapes[0]
        kw = (op.params.get("kernel_shape") or [1, 1])[1]
        return 4 * n * c * kw * h * w   # one row-window matrix (about Ho*Wo <= H*W columns), float32

    def prepare(self, op):
        return repacked(op, "kernel_rows", row_weights)

    @staticmethod
    def operands(op, inputs):
        """(x, the padded input, the row weights [kh, M, C*kw], bias, kw, strides, dilations, (Ho, Wo)) in the
        work dtype."""
        x = np.asarray(inputs[0])
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        wr = op.weights.get("kernel_rows")
        if wr is None:
            wr = row_weights(op.weights["kernel"] if "kernel" in op.weights else inputs[1])
        wr = wr.astype(dtype, copy=False)
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2 and "kernel" not in op.weights and "kernel_rows" not in op.weights:
            b = inputs[2]
        kh = wr.shape[0]
        kw = wr.shape[2] // x.shape[1]
        strides, dil, pre, post, out = geometry(op.params, x.shape, [kh, kw])
        return x, pad_input(x, pre, post), wr, b, kw, strides, dil, out

    def run(self, op, inputs):
        x, xp, wr, b, kw, strides, dil, out = self.operands(op, inputs)
        dtype = x.dtype
        kh, m = wr.shape[:2]
        n, c = x.shape[:2]
        p = out[0] * out[1]
        rows = np.empty((n, c, kw, out[0], out[1]), dtype)
        y = tmp = None
        for i in range(kh):
            for j in range(kw):
                rows[:, :, j] = xp[(slice(None), slice(None)) + tap_slices((i, j), dil, strides, out)]
            part = rows.reshape(n, c * kw, p)
            if y is None:
                y = np.matmul(wr[i], part)
                tmp = np.empty_like(y)
            else:
                np.matmul(wr[i], part, out=tmp)
                y += tmp
        return finish(op, y.reshape(n, m, out[0], out[1]), b, inputs, x.dtype)
