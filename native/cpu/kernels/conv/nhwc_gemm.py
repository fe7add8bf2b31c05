"""The nhwc-gemm tactic: a 2-D convolution computed channels-last inside an NCHW network, reformats included.

It reformats its input NCHW -> NHWC, gathers the patches in channel-last order with one strided window view
([N, Ho, Wo, kh, kw, C] -> [N*Ho*Wo, kh*kw*C]: one copy, long contiguous runs of C), does one GEMM with the kernel
packed [kh*kw*C, M] at build time, and reformats the [N*Ho*Wo, M] result back to NCHW for its neighbours. Its timed
cost therefore includes both reformats: where they cost more than channel-last patches save, timing drops it (the
layout pass, passes/layout.py, is the other way to run NHWC: whole regions, reformats only at their borders).

On more than one pool thread the GEMM runs in two bands of pixel rows at once, the worker's outside the GIL, each
band's patch gather and reformat beside it (gemm_bands.py): the same floats as the one-thread product.

Numerics: the GEMM's reduction runs over (kh, kw, C) where im2col-gemm's runs over (C, kh, kw): same error bound,
other rounding.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.gemm_bands import banded_gemm
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias, repacked, work_dtype
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import Tactic, register_tactic


def hwio(w):
    """[M, C, kh, kw] -> [kh*kw*C, M] (the channel-last patch order)."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, w.shape[0]))


def nhwc_windows(xh, ks, strides, dil, out):
    """Strided view [N, Ho, Wo, kh, kw, C] of a padded NHWC tensor (no copy)."""
    s = xh.strides
    n, c = xh.shape[0], xh.shape[3]
    return np.lib.stride_tricks.as_strided(
        xh, (n, out[0], out[1], ks[0], ks[1], c),
        (s[0], s[1] * strides[0], s[2] * strides[1], s[1] * dil[0], s[2] * dil[1], s[3]), writeable=False)


def nhwc_padded(x, pre, post, threads=1):
    """x [N, C, H, W] as a zero-padded channel-last [N, Hp, Wp, C] (negative pads crop): the border zeroed, the
    interior transposed in one copy, split into bands of rows over the pool when `threads` > 1 and the copy is
    large (a reformat is a quarter of a small banded layer's time, on one core)."""
    n, c = x.shape[:2]
    p0, p1, q0, q1 = max(pre[0], 0), max(post[0], 0), max(pre[1], 0), max(post[1], 0)
    src = x[:, :, max(-pre[0], 0):x.shape[2] - max(-post[0], 0), max(-pre[1], 0):x.shape[3] - max(-post[1], 0)]
    h, w = src.shape[2:]
    xh = np.empty((n, h + p0 + p1, w + q0 + q1, c), x.dtype)
    xh[:, :p0] = 0
    xh[:, p0 + h:] = 0
    xh[:, p0:p0 + h, :q0] = 0
    xh[:, p0:p0 + h, q0 + w:] = 0

    def rows(r):
        xh[:, p0 + r[0]:p0 + r[1], q0:q0 + w] = src[:, :, r[0]:r[1]].transpose(0, 2, 3, 1)
    if threads > 1 and src.size >= NHWC_SPLIT_MIN:
        parallel_for(rows, split(h, threads))
    else:
        rows((0, h))
    return xh


def row_pieces(a, e, wo):
    """The flat pixels a..e of a [Ho, Wo] map as (row0, col0, row1, col1) blocks: a partial first row, whole rows,
    a partial last row (the bands of gemm_bands cut at pixels, not rows)."""
    h0, h1 = -(-a // wo), e // wo
    if a // wo == (e - 1) // wo and a % wo:      # within one row
        return [(a // wo, a % wo, a // wo + 1, (e - 1) % wo + 1)]
    pieces = [(a // wo, a % wo, h0, wo)] if a % wo else []
    if h0 < h1:
        pieces.append((h0, 0, h1, wo))
    if e % wo:
        pieces.append((h1, 0, h1 + 1, e % wo))
    return pieces


NHWC_SPLIT_MIN = 1 << 18   # input elements from which the reformat is split over the pool (a hand-off: 25-100 us)


def patch_workspace(op, input_shapes) -> int:
    """Scratch bytes of a channels-last patch GEMM: the NHWC (padded) input and its patch matrix, float32."""
    if not input_shapes or input_shapes[0] is None:
        return 0
    n, c, h, w = input_shapes[0]
    kh, kw = op.params.get("kernel_shape") or [1, 1]
    return 4 * n * (h + 2) * (w + 2) * c * (1 + kh * kw)


@register_tactic
class NhwcGemm(Tactic):
    """Channel-last patches and one GEMM between two reformats (see the module docstring)."""
    kind, name = "Convolution", "nhwc-gemm"
    honours = {"post_ops", "side"}

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        if len(ks) != 2:
            return "2-D convolutions only"
        if ks == [1, 1]:
            return "a pointwise convolution gathers no patches (1x1-gemm)"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return None

    def workspace_size(self, op, input_shapes):
        return patch_workspace(op, input_shapes)

    def prepare(self, op):
        return repacked(op, "kernel_hwio", hwio)

    @staticmethod
    def operands(op, inputs):
        """(x, the HWIO kernel, bias or None) in the layer's working type: packed weights, or the kernel and bias
        given as inputs."""
        x = np.asarray(inputs[0])
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        const = "kernel" in op.weights or "kernel_hwio" in op.weights
        k = op.weights.get("kernel_hwio")
        if k is None:
            k = hwio(op.weights["kernel"] if const else inputs[1])
        k = k.astype(dtype, copy=False)
        b = conv_bias(op.weights)
        if b is None and not const and len(inputs) > 2:
            b = inputs[2]
        return x, k, b

    def run(self, op, inputs):
        x, k, b = self.operands(op, inputs)
        dtype = x.dtype
        c = x.shape[1]
        taps = k.shape[0] // c
        ks = list(op.params.get("kernel_shape") or [])
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        n = x.shape[0]
        xh = nhwc_padded(x, pre, post, num_threads())   # reformat in: NCHW -> padded NHWC, one copy
        assert taps == ks[0] * ks[1]
        win = nhwc_windows(xh, ks, strides, dil, out)               # [N, Ho, Wo, kh, kw, C], a view
        ho, wo = out
        m = k.shape[1]
        cols = np.empty((n * ho * wo, taps * c), dtype)              # the patches, channel-last
        y = np.empty((n * ho * wo, m), dtype)                        # [N*Ho*Wo, M]
        yc = np.empty((n, m, ho * wo), dtype)                        # reformatted NCHW for the neighbours
        hw = ho * wo

        def samples(p0, p1):   # the pixel range p0..p1 of [N*Ho*Wo] per sample: (sample, first, end, offset)
            for ni in range(p0 // hw, -(-p1 // hw)):
                a, e = max(p0 - ni * hw, 0), min(p1 - ni * hw, hw)
                if a < e:
                    yield ni, a, e, ni * hw

        def gather(p0, p1):
            for ni, a, e, off in samples(p0, p1):
                for r0, w0, r1, w1 in row_pieces(a, e, wo):
                    q = off + r0 * wo + w0
                    cols[q:q + (r1 - r0) * (w1 - w0)].reshape(r1 - r0, w1 - w0, *win.shape[3:])[...] = \
                        win[ni, r0:r1, w0:w1]

        def after(p0, p1):     # reformat out: NHWC -> NCHW
            for ni, a, e, off in samples(p0, p1):
                yc[ni, :, a:e] = y[off + a:off + e].T
        banded_gemm(cols, k, y, gather, after)
        return finish(op, yc.reshape(n, m, ho, wo), b, inputs, x.dtype)
