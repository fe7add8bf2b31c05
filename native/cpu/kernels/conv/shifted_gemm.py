"""The shifted-gemm tactic: a stride-1 2-D convolution as kh*kw GEMMs over shifted windows of the flattened input."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry, pad_input
from native.cpu.kernels.conv.weights import kernel_and_bias, kernel_spatial, repacked, work_dtype
from native.tactics import Tactic, register_tactic


@register_tactic
class ShiftedGemm(Tactic):
    """Stride-1 2-D convolution without a column matrix: flatten the padded input and, for each tap, multiply
    W[tap] ([M, C]) by a contiguous window of it (offset i*d*Wp + j*d), accumulating [M, Ho*Wp]; the Wp - Wo
    wrap-around columns are cropped at the end. Trades the im2col copy for kh*kw smaller GEMMs."""
    kind, name = "Convolution", "shifted-gemm"
    honours = {"post_ops", "side"}

    def supports(self, op, input_shapes):
        p = op.params
        ks = p.get("kernel_shape") or []
        return (len(ks) == 2 and (p.get("groups", 1) or 1) == 1 and not p.get("integer")
                and all(s == 1 for s in (p.get("strides") or [1, 1])) and ks != [1, 1])

    def prepare(self, op):
        return repacked(op, "kernel_tap_gemm", lambda w: w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1))

    def run(self, op, inputs):
        x, xf, wt, b, ks, dil, (ho, wo), wp = self.operands(op, inputs)
        n, m = x.shape[0], wt.shape[1]
        y = np.empty((n, m, ho * wp), xf.dtype)
        shifted_taps(xf, wt, ks, dil, wp, y, 0, ho * wp)
        return finish(op, y.reshape(n, m, ho, wp)[:, :, :, :wo], b, inputs, x.dtype)

    @staticmethod
    def operands(op, inputs):
        """(x, the flattened padded input [N, C, Hp*Wp], the tap weights [taps, M, C], bias, kernel, dilations,
        (Ho, Wo), Wp) in the work dtype."""
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        wt = op.weights.get("kernel_tap_gemm")
        if wt is None:
            w = np.asarray(w, dtype)
            wt = w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1)
        wt = wt.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        extra = 1 if ks[1] > 1 else 0
        xp = pad_input(x, [max(pre[0], 0), max(pre[1], 0)], [max(post[0], 0) + extra, max(post[1], 0)])
        n, c, hp, wp = xp.shape
        return x, xp.reshape(n, c, hp * wp), wt, b, ks, dil, out, wp


def shifted_taps(xf, wt, ks, dil, wp, y, c0, c1):
    """y[:, :, c0:c1] = the sum over taps, in tap order, of W[tap] @ the input window at the tap's offset (columns
    c0..c1 of the [M, Ho*Wp] result: Wp - Wo wrap-around columns per output row, cropped by the caller)."""
    yb = y[:, :, c0:c1]
    tmp = None
    for t, (i, j) in enumerate(itertools.product(range(ks[0]), range(ks[1]))):
        off = i * dil[0] * wp + j * dil[1]
        view = xf[:, :, off + c0:off + c1]
        if t == 0:
            np.matmul(wt[t], view, out=yb)
        else:
            if tmp is None:
                tmp = np.empty_like(yb)
            np.matmul(wt[t], view, out=tmp)
            yb += tmp
