"""The inverted-residual block's compiled passes (the `jit` extra; native/cpu/kernels/inverted_residual.py): the
expanded tensor stays channels-last [H, W, C] from the expand GEMM's output to the project GEMM's input, so no
pass transposes it.

    expanded_into_padded(g [H*W, C], bias [n], act, xp [Hp, Wp, C], pt, pl, h, w, e0)
        channels [e0, e0 + n) of xp: the border zeroed and the interior [pt:pt+H, pl:pl+W] = act(g + bias) (codes as
        jit_dw: 0 none, 1 RELU, 2 HARD_SWISH, 3 HARD_SWISH_RELU6), one pass: the expand 1x1 convolution's
        epilogue, written where the depthwise taps read it.
    depthwise_nhwc(xp [Hp, Wp, C], w [kh, kw, >= n], bias [n], act, y [Ho, Wo, C], sh, sw, sums [n] float64 (or
                   empty), e0, lo, hi)
        channels [e0, e0 + n) of y = act(depthwise(xp) + bias) (w and bias: those channels' own contiguous
        copies; C, the pixel stride of xp and y, may exceed the channels: rows padded to whole cache lines), each
        output's taps summed in (i, j) order, a kernel row of 3 or 5 taps one loop body over the channels for two
        (3x3) or three (5x5) output pixels at once (their shared input runs loaded once); unless sums is empty it
        gets each channel's float64 sum of y (the squeeze-excite mean's numerator) from the same pass. Channel
        ranges: the pool's workers take one each (channels are independent up to the gate); offsets into the flat
        buffers, not slices, per pixel. Kernel rows that read only zero-padding rows (padded rows outside [lo, hi))
        are skipped: PaddleOCR's 5x5 kernels over 2-3-row maps spent 40-60% of their taps there. The caller passes
        (0, Hp) where a weight is not finite (its products with the padding are NaN, not zero); a skipped +-0
        product can change a sum's sign of zero only.
    gate(sums [C] float64, count, w1t [C, M], b1, act1 [k, 3], w2t [M, C], b2, act2, g [C])
        the squeeze-excite gate from the sums: mean = sums / count rounded to float32, then jit_se's two products
        and activations (its codes: 1 RELU, 2 HARD_SIGMOID, 3 HARD_SWISH, 4 CLIP).
    scaled_rows(w [M, C], g [C], out [M, C])
        out = w * g per column: the gate folded into the project kernel (M x C products instead of H x W x C).
    bias_residual(y [M, S], bias [M] (or empty), res [M, S] (or [0, 0]))
        y = y + bias (+ res) in place: the project convolution's epilogue.
    scaled_cols(wt [E, M], g [E], out [E, M], m0, m1), project_out(t [S, M], bias, res, y [M, S], m0, m1),
    gate_cols (gate then scaled_cols over every column, one call)
        ir-direct's project stage on its output channels [m0, m1): the gate folded into the transposed kernel, and
        the [S, M] product (a GEMM on the channels-last operand as stored: OpenBLAS runs it 1.2-1.9x faster than
        the [M, E] x [E, S] product reading that operand transposed) stored NCHW with bias and shortcut.
    bias_act_rows(a [C, S], bias [C], act), channel_sums(y [C, S], sums [C] float64)
        the channels-first steps of ir-planes, which runs the depthwise stage as jit_dw.depthwise_planes (wide,
        short maps: PaddleOCR's 3 x 96, where one channel's plane is a long unit-stride run).

Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_dw import _hard_swish, _hard_swish_relu6, _relu
from native.cpu.jit_se import _dense

_NJIT = dict(nogil=True, cache=True, error_model="numpy")


@numba.njit(**_NJIT)
def expanded_into_padded(g, bias, act, xp, pt, pl, h, w, e0):
    hp, wp, c = xp.shape
    n = bias.shape[0]
    _zero_border(xp, pt, pl, h, w, e0, e0 + n)
    t = xp.dtype.type
    zero, one, sixth, half, inf, three, six = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf), t(3.0), t(6.0)
    gc = g.shape[1]
    gf = g.reshape(g.shape[0] * gc)
    xf = xp.reshape(hp * wp * c)
    for i in range(h):
        for j in range(w):
            q = (i * w + j) * gc + e0
            o = ((i + pt) * wp + j + pl) * c + e0
            src = gf[q:q + n]
            dst = xf[o:o + n]
            if act == 1:
                for k in range(n):
                    dst[k] = _relu(src[k] + bias[k], zero, inf)
            elif act == 2:
                for k in range(n):
                    dst[k] = _hard_swish(src[k] + bias[k], zero, one, sixth, half)
            elif act == 3:
                for k in range(n):
                    dst[k] = _hard_swish_relu6(src[k] + bias[k], zero, three, six)
            else:
                for k in range(n):
                    dst[k] = src[k] + bias[k]


@numba.njit(inline="always")
def _activate(a, act):
    """The activation codes on the vector `a` in place (jit_dw's operations): 1 RELU, 2 HARD_SWISH,
    3 HARD_SWISH_RELU6; 0 nothing."""
    t = a.dtype.type
    zero, one, sixth, half, inf, three, six = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf), t(3.0), t(6.0)
    if act == 1:
        for k in range(a.shape[0]):
            a[k] = _relu(a[k], zero, inf)
    elif act == 2:
        for k in range(a.shape[0]):
            a[k] = _hard_swish(a[k], zero, one, sixth, half)
    elif act == 3:
        for k in range(a.shape[0]):
            a[k] = _hard_swish_relu6(a[k], zero, three, six)


@numba.njit(**_NJIT)
def _zero_border(xp, pt, pl, h, w, e0, e1):
    hp, wp = xp.shape[0], xp.shape[1]
    for i in range(hp):
        if i < pt or i >= pt + h:
            for j in range(wp):
                xp[i, j, e0:e1] = 0
        else:
            for j in range(pl):
                xp[i, j, e0:e1] = 0
            for j in range(pl + w, wp):
                xp[i, j, e0:e1] = 0


@numba.njit(**_NJIT)
def depthwise_nhwc(xp, w, bias, act, y, sh, sw, sums, e0, lo, hi):
    kw, n = w.shape[1], bias.shape[0]
    if kw == 5:
        _taps5(xp, w, y, sh, sw, e0, n, lo, hi)
    elif kw == 3:
        _taps3(xp, w, y, sh, sw, e0, n, lo, hi)
    else:
        _taps(xp, w, y, sh, sw, e0, n, lo, hi)
    _epilogue(y, bias, act, sums, e0)


@numba.njit(**_NJIT)
def _epilogue(y, bias, act, sums, e0):
    """Channels [e0, e0 + len(bias)) of y: + bias, the activation, and their float64 sums into `sums` (unless
    it is empty)."""
    ho, wo, c = y.shape
    n = bias.shape[0]
    want_sums = sums.shape[0] == n
    if want_sums:
        sums[:] = 0.0
    yf = y.reshape(ho * wo * c)
    for q in range(ho * wo):
        a = yf[q * c + e0:q * c + e0 + n]
        for k in range(n):
            a[k] = a[k] + bias[k]
        _activate(a, act)
        if want_sums:
            for k in range(n):
                sums[k] += a[k]


@numba.njit(inline="always")
def _rows(top, lo, hi, kh):
    """The kernel rows [i0, i1) of an output row whose taps start at padded row `top` that read an input row (padded
    rows [lo, hi)); all kh where none does (the sum of the zero padding's products is then computed)."""
    i0 = max(0, lo - top)
    i1 = min(kh, hi - top)
    if i0 >= i1:
        return 0, kh
    return i0, i1


@numba.njit(**_NJIT)
def _taps5(xp, w, y, sh, sw, e0, n, lo, hi):
    """5-wide kernel rows; output pixels three at a time (stride 1 or 2): the group's kernel row reads 7 (9)
    input runs and 5 weight runs for 15 products instead of 15 and 15 (the loop was bound by loads), the same
    sums in the same order as one pixel at a time. Loop bodies spelled out: numba's inlined helpers measured
    1.3-2.5x slower; three pixels against two: 0.83-1.05x on mobilenetv3's and PaddleOCR's 5x5 layers. Kernel
    rows reading only padding rows (padded rows outside [lo, hi)) are skipped (_rows)."""
    hp, wp, c = xp.shape
    ho, wo = y.shape[0], y.shape[1]
    flat = xp.reshape(hp * wp * c)
    yf = y.reshape(ho * wo * c)
    groups = wo // 3 if sw <= 2 else 0
    for r in range(ho):
        i0, i1 = _rows(r * sh, lo, hi, w.shape[0])
        for gq in range(groups):
            ow = 3 * gq
            q = (r * wo + ow) * c + e0
            a0, a1, a2 = yf[q:q + n], yf[q + 1 * c:q + 1 * c + n], yf[q + 2 * c:q + 2 * c + n]
            for i in range(i0, i1):
                w0, w1, w2, w3, w4 = w[i, 0], w[i, 1], w[i, 2], w[i, 3], w[i, 4]
                o = ((r * sh + i) * wp + ow * sw) * c + e0
                x0 = flat[o + 0 * c:o + 0 * c + n]
                x1 = flat[o + 1 * c:o + 1 * c + n]
                x2 = flat[o + 2 * c:o + 2 * c + n]
                x3 = flat[o + 3 * c:o + 3 * c + n]
                x4 = flat[o + 4 * c:o + 4 * c + n]
                x5 = flat[o + 5 * c:o + 5 * c + n]
                x6 = flat[o + 6 * c:o + 6 * c + n]
                if sw == 1:
                    if i == i0:
                        for k in range(n):
                            u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                            s0 = x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s0 += x3[k] * u3
                            s0 += x4[k] * u4
                            s1 = x1[k] * u0
                            s1 += x2[k] * u1
                            s1 += x3[k] * u2
                            s1 += x4[k] * u3
                            s1 += x5[k] * u4
                            s2 = x2[k] * u0
                            s2 += x3[k] * u1
                            s2 += x4[k] * u2
                            s2 += x5[k] * u3
                            s2 += x6[k] * u4
                            a0[k] = s0
                            a1[k] = s1
                            a2[k] = s2
                    else:
                        for k in range(n):
                            u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                            s0 = a0[k]
                            s0 += x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s0 += x3[k] * u3
                            s0 += x4[k] * u4
                            s1 = a1[k]
                            s1 += x1[k] * u0
                            s1 += x2[k] * u1
                            s1 += x3[k] * u2
                            s1 += x4[k] * u3
                            s1 += x5[k] * u4
                            s2 = a2[k]
                            s2 += x2[k] * u0
                            s2 += x3[k] * u1
                            s2 += x4[k] * u2
                            s2 += x5[k] * u3
                            s2 += x6[k] * u4
                            a0[k] = s0
                            a1[k] = s1
                            a2[k] = s2
                else:
                    x7 = flat[o + 7 * c:o + 7 * c + n]
                    x8 = flat[o + 8 * c:o + 8 * c + n]
                    if i == i0:
                        for k in range(n):
                            u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                            s0 = x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s0 += x3[k] * u3
                            s0 += x4[k] * u4
                            s1 = x2[k] * u0
                            s1 += x3[k] * u1
                            s1 += x4[k] * u2
                            s1 += x5[k] * u3
                            s1 += x6[k] * u4
                            s2 = x4[k] * u0
                            s2 += x5[k] * u1
                            s2 += x6[k] * u2
                            s2 += x7[k] * u3
                            s2 += x8[k] * u4
                            a0[k] = s0
                            a1[k] = s1
                            a2[k] = s2
                    else:
                        for k in range(n):
                            u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                            s0 = a0[k]
                            s0 += x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s0 += x3[k] * u3
                            s0 += x4[k] * u4
                            s1 = a1[k]
                            s1 += x2[k] * u0
                            s1 += x3[k] * u1
                            s1 += x4[k] * u2
                            s1 += x5[k] * u3
                            s1 += x6[k] * u4
                            s2 = a2[k]
                            s2 += x4[k] * u0
                            s2 += x5[k] * u1
                            s2 += x6[k] * u2
                            s2 += x7[k] * u3
                            s2 += x8[k] * u4
                            a0[k] = s0
                            a1[k] = s1
                            a2[k] = s2
        for ow in range(3 * groups, wo):
            q = (r * wo + ow) * c + e0
            a0 = yf[q:q + n]
            for i in range(i0, i1):
                w0, w1, w2, w3, w4 = w[i, 0], w[i, 1], w[i, 2], w[i, 3], w[i, 4]
                o = ((r * sh + i) * wp + ow * sw) * c + e0
                x0 = flat[o + 0 * c:o + 0 * c + n]
                x1 = flat[o + 1 * c:o + 1 * c + n]
                x2 = flat[o + 2 * c:o + 2 * c + n]
                x3 = flat[o + 3 * c:o + 3 * c + n]
                x4 = flat[o + 4 * c:o + 4 * c + n]
                if i == i0:
                    for k in range(n):
                        u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                        s0 = x0[k] * u0
                        s0 += x1[k] * u1
                        s0 += x2[k] * u2
                        s0 += x3[k] * u3
                        s0 += x4[k] * u4
                        a0[k] = s0
                else:
                    for k in range(n):
                        u0, u1, u2, u3, u4 = w0[k], w1[k], w2[k], w3[k], w4[k]
                        s0 = a0[k]
                        s0 += x0[k] * u0
                        s0 += x1[k] * u1
                        s0 += x2[k] * u2
                        s0 += x3[k] * u3
                        s0 += x4[k] * u4
                        a0[k] = s0


@numba.njit(**_NJIT)
def _taps3(xp, w, y, sh, sw, e0, n, lo, hi):
    """3-wide kernel rows, output pixels in pairs as _taps5 (4 or 5 input runs and 3 weight runs for 6 products)."""
    hp, wp, c = xp.shape
    ho, wo = y.shape[0], y.shape[1]
    flat = xp.reshape(hp * wp * c)
    yf = y.reshape(ho * wo * c)
    groups = wo // 2 if sw <= 2 else 0
    for r in range(ho):
        i0, i1 = _rows(r * sh, lo, hi, w.shape[0])
        for gq in range(groups):
            ow = 2 * gq
            q = (r * wo + ow) * c + e0
            a0, a1 = yf[q:q + n], yf[q + 1 * c:q + 1 * c + n]
            for i in range(i0, i1):
                w0, w1, w2 = w[i, 0], w[i, 1], w[i, 2]
                o = ((r * sh + i) * wp + ow * sw) * c + e0
                x0 = flat[o + 0 * c:o + 0 * c + n]
                x1 = flat[o + 1 * c:o + 1 * c + n]
                x2 = flat[o + 2 * c:o + 2 * c + n]
                x3 = flat[o + 3 * c:o + 3 * c + n]
                if sw == 1:
                    if i == i0:
                        for k in range(n):
                            u0, u1, u2 = w0[k], w1[k], w2[k]
                            s0 = x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s1 = x1[k] * u0
                            s1 += x2[k] * u1
                            s1 += x3[k] * u2
                            a0[k] = s0
                            a1[k] = s1
                    else:
                        for k in range(n):
                            u0, u1, u2 = w0[k], w1[k], w2[k]
                            s0 = a0[k]
                            s0 += x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s1 = a1[k]
                            s1 += x1[k] * u0
                            s1 += x2[k] * u1
                            s1 += x3[k] * u2
                            a0[k] = s0
                            a1[k] = s1
                else:
                    x4 = flat[o + 4 * c:o + 4 * c + n]
                    if i == i0:
                        for k in range(n):
                            u0, u1, u2 = w0[k], w1[k], w2[k]
                            s0 = x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s1 = x2[k] * u0
                            s1 += x3[k] * u1
                            s1 += x4[k] * u2
                            a0[k] = s0
                            a1[k] = s1
                    else:
                        for k in range(n):
                            u0, u1, u2 = w0[k], w1[k], w2[k]
                            s0 = a0[k]
                            s0 += x0[k] * u0
                            s0 += x1[k] * u1
                            s0 += x2[k] * u2
                            s1 = a1[k]
                            s1 += x2[k] * u0
                            s1 += x3[k] * u1
                            s1 += x4[k] * u2
                            a0[k] = s0
                            a1[k] = s1
        for ow in range(2 * groups, wo):
            q = (r * wo + ow) * c + e0
            a0 = yf[q:q + n]
            for i in range(i0, i1):
                w0, w1, w2 = w[i, 0], w[i, 1], w[i, 2]
                o = ((r * sh + i) * wp + ow * sw) * c + e0
                x0 = flat[o + 0 * c:o + 0 * c + n]
                x1 = flat[o + 1 * c:o + 1 * c + n]
                x2 = flat[o + 2 * c:o + 2 * c + n]
                if i == i0:
                    for k in range(n):
                        u0, u1, u2 = w0[k], w1[k], w2[k]
                        s0 = x0[k] * u0
                        s0 += x1[k] * u1
                        s0 += x2[k] * u2
                        a0[k] = s0
                else:
                    for k in range(n):
                        u0, u1, u2 = w0[k], w1[k], w2[k]
                        s0 = a0[k]
                        s0 += x0[k] * u0
                        s0 += x1[k] * u1
                        s0 += x2[k] * u2
                        a0[k] = s0


@numba.njit(**_NJIT)
def _taps(xp, w, y, sh, sw, e0, n, lo, hi):
    hp, wp, c = xp.shape
    kh, kw = w.shape[0], w.shape[1]
    ho, wo = y.shape[0], y.shape[1]
    flat = xp.reshape(hp * wp * c)
    yf = y.reshape(ho * wo * c)
    for r in range(ho):
        i0, i1 = _rows(r * sh, lo, hi, kh)
        for ow in range(wo):
            q = (r * wo + ow) * c + e0
            a = yf[q:q + n]
            for i in range(i0, i1):
                for j in range(kw):
                    o = ((r * sh + i) * wp + ow * sw + j) * c + e0
                    xj = flat[o:o + n]
                    wj = w[i, j]
                    if i == i0 and j == 0:
                        for k in range(n):
                            a[k] = xj[k] * wj[k]
                    else:
                        for k in range(n):
                            a[k] += xj[k] * wj[k]


@numba.njit(**_NJIT)
def gate(sums, count, w1t, b1, act1, w2t, b2, act2, g):
    c = sums.shape[0]
    mean = np.empty(c, g.dtype)
    for k in range(c):
        mean[k] = sums[k] / count
    h = np.empty(w1t.shape[1], g.dtype)
    _dense(mean, w1t, b1, act1, h)
    _dense(h, w2t, b2, act2, g)


@numba.njit(**_NJIT)
def scaled_rows(w, g, out):
    for m in range(w.shape[0]):
        wm, om = w[m], out[m]
        for k in range(w.shape[1]):
            om[k] = wm[k] * g[k]


@numba.njit(**_NJIT)
def bias_residual(y, bias, res):
    m_n, s_n = y.shape
    has_bias, has_res = bias.shape[0] == m_n, res.shape[0] == m_n
    for m in range(m_n):
        ym = y[m]
        if has_bias:
            b = bias[m]
            for s in range(s_n):
                ym[s] = ym[s] + b
        if has_res:
            rm = res[m]
            for s in range(s_n):
                ym[s] = ym[s] + rm[s]


@numba.njit(**_NJIT)
def bias_act_rows(a, bias, act):
    """a[c] = act(a[c] + bias[c]) in place for a [C, S] (channels first): the expand GEMM's epilogue where the
    depthwise stage runs on planes (ir-planes)."""
    for c in range(a.shape[0]):
        row = a[c]
        b = bias[c]
        for s in range(row.shape[0]):
            row[s] = row[s] + b
        _activate(row, act)


@numba.njit(**_NJIT)
def channel_sums(y, sums):
    """sums[c] = the float64 sum of y[c] for y [C, S]: the squeeze-excite mean's numerators on planes, as 16 running
    sums added up in order (one running sum is a chain of dependent adds: [16, 3136] 50 us, this ~4)."""
    s_n = y.shape[1]
    part = np.empty(16, np.float64)
    s16 = s_n - s_n % 16
    for c in range(y.shape[0]):
        row = y[c]
        for q in range(16):
            part[q] = 0.0
        for k0 in range(0, s16, 16):
            for q in range(16):
                part[q] += row[k0 + q]
        acc = 0.0
        for q in range(16):
            acc += part[q]
        for k in range(s16, s_n):
            acc += row[k]
        sums[c] = acc


@numba.njit(**_NJIT)
def gate_cols(sums, count, w1t, b1, act1, w2t, b2, act2, g, wt, out):
    """gate(...), then scaled_cols(wt, g, out) over every column: one call where the project stage is not split."""
    gate(sums, count, w1t, b1, act1, w2t, b2, act2, g)
    scaled_cols(wt, g, out, 0, wt.shape[1])


@numba.njit(**_NJIT)
def scaled_cols(wt, g, out, m0, m1):
    """out[:, m0:m1] = wt[:, m0:m1] * g per row: the gate folded into the transposed project kernel [E, M]."""
    n = m1 - m0
    for k in range(wt.shape[0]):
        gk = g[k]
        src, dst = wt[k, m0:m1], out[k, m0:m1]
        for j in range(n):     # over a slice from 0: a loop from m0 stayed scalar (26.6 against 2.6 us, [576, 96])
            dst[j] = src[j] * gk


@numba.njit(**_NJIT)
def project_out(t, bias, res, y, m0, m1):
    """y[m] = t[:, m] + bias[m] (+ res[m]) for m in [m0, m1): the project GEMM's [S, M] product stored NCHW with its
    epilogue in the same pass (bias / res empty: none)."""
    s_n = t.shape[0]
    has_bias, has_res = bias.shape[0] > 0, res.shape[0] > 0
    for m in range(m0, m1):
        ym = y[m]
        for q in range(s_n):
            ym[q] = t[q, m]
        if has_bias:
            b = bias[m]
            for q in range(s_n):
                ym[q] = ym[q] + b
        if has_res:
            rm = res[m]
            for q in range(s_n):
                ym[q] = ym[q] + rm[q]
