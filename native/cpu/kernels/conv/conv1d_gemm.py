"""The conv1d-gemm tactic: a 1-D convolution run as a 2-D one of height 1 through the banded GEMM driver.

im2col-gemm's N-d path gathers the column matrix one kernel tap at a time in Python: a 1-D convolution with a long
kernel (an STFT written as Conv, a polyphase resampler: 64-512 taps) costs hundreds of strided copies per call. As a
2-D convolution over [N, C, 1, L] with kernel [1, k], `conv2d_gemm` builds the same patch matrix with one strided
copy per band and runs the GEMMs straight into the output (bias in the GEMM, epilogue in place). A different
computation from im2col-gemm's (the bias rides in the GEMM), so the builder's timing chooses between them.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import region_epilogue, view_as
from native.cpu.kernels.conv.gemm2d import conv2d_gemm, recipe
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.im2col_gemm import Im2colGemm
from native.cpu.kernels.conv.weights import (bias_in_gemm, gemm_scale, gemm_weights, kernel_and_bias, kernel_spatial,
                                             pack_gemm, side_cin, work_dtype)
from native.cpu.threads import num_threads
from native.tactics import Tactic, register_tactic

_ALL = (slice(None), slice(None))


@register_tactic
class Conv1dGemm(Tactic):
    """[N, C, L] convolutions (any stride, dilation, groups, pads >= 0) as [N, C, 1, L] through conv2d_gemm."""
    kind, name = "Convolution", "conv1d-gemm"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        ks = op.params.get("kernel_shape")
        if ks is not None and len(ks) != 1:
            return "1-D convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 3:
            return "[N, C, L] inputs only"
        if op.params.get("integer"):
            return "float convolutions only"
        if any(s["op"] == "add" or (s["op"] == "bias" and s.get("axis", 1) != 1)
               for s in op.params.get("post_ops") or ()):
            return "residual adds and non-channel biases are fused into 2-D layouts only"
        return None

    def prepare(self, op):
        return pack_gemm(op)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        fast = recipe(op, "_small1d", x, inputs, _Small1d.make)
        if fast is not None:
            return fast.run(op, x, outputs, inputs)
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if x.ndim != 3 or len(ks) != 1 or dtype.itemsize < 4 or min(pre) < 0 or min(post) < 0:
            return Im2colGemm.run(self, op, inputs)   # the general path (cropping pads, half types)
        g = op.params.get("groups", 1) or 1
        biased = bias_in_gemm(op)
        dst = outputs[0] if outputs else None
        if dst is not None:
            dst = dst[:, :, None, :] if dst.ndim == 3 and dst.flags.c_contiguous else None
        y = conv2d_gemm(op, x[:, :, None, :], gemm_weights(op, w, g, dtype, raw=True), None if biased else b,
                        [1, ks[0]], [1, strides[0]], [1, dil[0]], [0, pre[0]], [0, post[0]], [1, out[0]], inputs,
                        scale=gemm_scale(op), bias_col=biased, dst=dst)[0]
        return [y.reshape(y.shape[0], y.shape[1], y.shape[3])]


class _Small1d:
    """The single-threaded path of `conv2d_gemm` for a small 1-D convolution at one input shape, with everything
    that depends only on the weights and that shape worked out once (Python bookkeeping, not arithmetic, is what a
    40-MAC-per-output layer costs): the patch matrix is one gather from the flat input (padding taps read a zero
    appended after it) plus the ones row of the bias column, then the same GEMM into the output and the same
    in-place epilogue. The values are the ones conv2d_gemm computes: the same operands in the same GEMM call."""

    __slots__ = ("shape", "dtype", "wm", "bias", "half", "idx", "size", "bias_col", "g", "mg",
                 "wo", "m", "flat")

    @classmethod
    def make(cls, op, x, inputs):
        """The recipe for `x`'s shape, or None where conv2d_gemm's general path runs (large, grouped over threads,
        phase-split, a merged shortcut, a batch dimension other than what was recorded)."""
        if x.ndim != 3 or op.params.get("integer") or op.params.get("side") or side_cin(op):
            return None
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        if x.dtype != dtype or len(ks) != 1 or dtype.itemsize < 4:
            return None
        (s,), (d,), (pre,), (post,), (wo,) = geometry(op.params, x.shape, ks)
        if pre < 0 or post < 0 or (ks[0] >= 4 * s > 4):   # cropping pads, or the phase-split input
            return None
        g = op.params.get("groups", 1) or 1
        bias_col = bias_in_gemm(op)
        wm = gemm_weights(op, w, g, dtype, raw=True)
        n, c, length = x.shape
        gg, mg, kdim = wm.shape
        m = gg * mg
        threads = num_threads()
        if n * m * (kdim - int(bias_col)) * wo >= tuning.PARALLEL_MIN_MACS and threads > 1:
            return None
        k = ks[0]
        scale = gemm_scale(op)
        bias = None if (bias_col or b is None) else np.asarray(b, dtype).reshape(-1)
        half = scale is not None
        if half and bias is not None:
            bias = bias * scale.reshape(())
        if bias_col:
            bias = None
        # patch element (ci, tap, o) reads flat input ci * L + o * s + tap * d - pre, or the zero at c * L
        pos = np.arange(wo)[None, :] * s + np.arange(k)[:, None] * d - pre             # [k, wo]
        idx = np.arange(c)[:, None, None] * length + pos[None]
        idx = np.where((pos >= 0) & (pos < length), idx, c * length).reshape(-1).astype(np.intp)
        r = cls()
        r.shape, r.dtype = x.shape, x.dtype
        r.wm, r.bias, r.half, r.idx, r.size, r.bias_col = wm, bias, half, idx, c * k * wo, bias_col
        r.g, r.mg, r.wo, r.m, r.flat = gg, mg, wo, m, c * length
        return r

    def run(self, op, x, outputs, inputs):
        n, wo, size = self.shape[0], self.wo, self.size
        dtype = self.dtype
        dst = outputs[0] if outputs else None
        if dst is not None and dst.shape == (n, self.m, wo) and dst.dtype == dtype and dst.flags.c_contiguous:
            y = dst[:, :, None, :]
        else:
            y = np.empty((n, self.m, 1, wo), dtype)
        xe = np.empty(self.flat + 1, dtype)
        xe[-1] = 0
        buf = np.empty(size + (wo if self.bias_col else 0), dtype)
        if self.bias_col:
            buf[size:] = 1
        cols = buf[:size]
        g = self.g
        for ni in range(n):
            xe[:-1] = x[ni].reshape(-1)
            np.take(xe, self.idx, out=cols)
            np.matmul(self.wm, buf.reshape(g, -1, wo), out=view_as(y[ni], (g, self.mg, wo)))
        if self.bias is not None or op.params.get("post_ops"):
            region_epilogue(y, _ALL, op, inputs, self.bias, self.half)
        return [y.reshape(n, self.m, wo)]
