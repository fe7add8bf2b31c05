"""Depthwise convolution loops with a kernel row's taps unrolled (the `jit` extra), reached through
`native.cpu.jit.kernel`:

    depthwise_cl_rows_nchw_k3 / _k5 (xl [Hp, Wp, C], w [kh, 3 or 5, C], bias [C] (or empty), y [C, Ho, Wo],
                                     r0, r1, sh, sw, dh, dw, act)
        jit.depthwise_cl_rows_nchw's floats (the depthwise tactics' sum per output: the first tap's product, then
        each further tap's product added in (i, j) order; + bias; the activation codes 0 none, 1 RELU, 2 HARD_SWISH,
        3 HARD_SWISH_RELU6), for kernels 3 or 5 taps wide. The kw taps of one kernel row are one loop body over the
        channels, so their partial sum stays in a register across the row instead of a load and a store of the
        accumulator per tap: 1.6-1.9x depthwise_cl_rows_nchw on mobilenetv3's and PaddleOCR's depthwise layers (the
        accumulator traffic, not the arithmetic, bounded that loop). Output row r is accumulated as [Wo, C] and
        then stored into NCHW y with its epilogue.
    depthwise_planes(x [C, H, W], taps [kh*kw, C], bias, y [C, Ho, Wo], kh, kw, sh, sw, dh, dw, ph, pw, act)
        the depthwise tactic's compiled loop (its signature and floats in jit.py's doc): per channel, the padded
        plane split into its stride phases so that each tap is one multiply-add over all output rows at once (a
        kernel row of 3 or 5 taps one loop, _row_taps3 / 5). Against the better of depthwise-cl and the per-row
        loop it replaced, one thread, 2026-11-29: mobilenetv3's 28-112-wide layers 0.51-0.94x, its 14-wide
        0.90-0.96x (its 7-wide outputs ~2x slower: the tactic timing keeps depthwise-cl there); PaddleOCR's
        classifier 0.62-1.07x, its detector 0.46-0.76x (docs/PERFORMANCE.md, h64).

Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)

_NJIT = dict(nogil=True, cache=True, error_model="numpy")


@numba.njit(inline="always")
def _relu(u, zero, inf):
    """numpy's clip to [0, inf] on one value: NaN kept, -0.0 to +0.0."""
    if u == u:
        u = u if u > zero else zero
        u = u if u < inf else inf
    return u


@numba.njit(inline="always")
def _hard_swish(v, zero, one, sixth, half):
    """activations._hard_swish's steps on one value: v * 1/6, + 0.5, clip to [0, 1], times v."""
    u = v * sixth
    u = u + half
    if u == u:
        u = u if u > zero else zero
        u = u if u < one else one
    return v * u


@numba.njit(inline="always")
def _hard_swish_relu6(v, zero, three, six):
    """activations._hard_swish_relu6's steps on one value: v + 3, clip to [0, 6], times v, / 6."""
    u = v + three
    if u == u:
        u = u if u > zero else zero
        u = u if u < six else six
    u = v * u
    return u / six


@numba.njit(**_NJIT)
def _activate(a, act):
    """The activation codes on the vector `a`, in place, in its dtype (jit.depthwise_cl_rows_nchw's operations):
    1 RELU (numpy's clip to [0, inf]: NaN kept, -0.0 to +0.0), 2 HARD_SWISH, 3 HARD_SWISH_RELU6; 0 nothing."""
    t = a.dtype.type
    zero, one, sixth, half, inf = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf)
    three, six = t(3.0), t(6.0)
    if act == 1:
        for k in range(a.shape[0]):
            a[k] = _relu(a[k], zero, inf)
    elif act == 2:    # as activations._hard_swish
        for k in range(a.shape[0]):
            a[k] = _hard_swish(a[k], zero, one, sixth, half)
    elif act == 3:    # as activations._hard_swish_relu6
        for k in range(a.shape[0]):
            a[k] = _hard_swish_relu6(a[k], zero, three, six)


@numba.njit(**_NJIT)
def _store_row(row, bias, y, r, act):
    """row [Wo, C] + bias, the activation (jit.depthwise_cl_rows_nchw's operations), into y[:, r, :]. The bias by
    2-D index and the activation over the whole row at once: a view and a call per output pixel cost more than
    the arithmetic on few channels (mobilenetv3's 16 x 112x112 stride-2 layer: the row epilogue 53 -> 18 us)."""
    wo, c = row.shape
    if bias.shape[0] == c:
        for ow in range(wo):
            for k in range(c):
                row[ow, k] = row[ow, k] + bias[k]
    _activate(row.reshape(wo * c), act)
    for k in range(c):
        yk = y[k, r]
        for ow in range(wo):
            yk[ow] = row[ow, k]


@numba.njit(**_NJIT)
def depthwise_cl_rows_nchw_k3(xl, w, bias, y, r0, r1, sh, sw, dh, dw, act):
    kh, c = w.shape[0], w.shape[2]
    wp = xl.shape[1]
    wo = y.shape[2]
    flat = xl.reshape(xl.shape[0] * wp * c)
    row = np.empty((wo, c), y.dtype)
    for r in range(r0, r1):
        for i in range(kh):
            w0, w1, w2 = w[i, 0], w[i, 1], w[i, 2]
            for ow in range(wo):
                o = ((r * sh + i * dh) * wp + ow * sw) * c
                x0 = flat[o:o + c]
                o += dw * c
                x1 = flat[o:o + c]
                o += dw * c
                x2 = flat[o:o + c]
                a = row[ow]
                if i == 0:
                    for k in range(c):
                        s = x0[k] * w0[k]
                        s += x1[k] * w1[k]
                        s += x2[k] * w2[k]
                        a[k] = s
                else:
                    for k in range(c):
                        s = a[k]
                        s += x0[k] * w0[k]
                        s += x1[k] * w1[k]
                        s += x2[k] * w2[k]
                        a[k] = s
        _store_row(row, bias, y, r, act)


@numba.njit(**_NJIT)
def depthwise_cl_rows_nchw_k5(xl, w, bias, y, r0, r1, sh, sw, dh, dw, act):
    kh, c = w.shape[0], w.shape[2]
    wp = xl.shape[1]
    wo = y.shape[2]
    flat = xl.reshape(xl.shape[0] * wp * c)
    row = np.empty((wo, c), y.dtype)
    for r in range(r0, r1):
        for i in range(kh):
            w0, w1, w2, w3, w4 = w[i, 0], w[i, 1], w[i, 2], w[i, 3], w[i, 4]
            for ow in range(wo):
                o = ((r * sh + i * dh) * wp + ow * sw) * c
                x0 = flat[o:o + c]
                o += dw * c
                x1 = flat[o:o + c]
                o += dw * c
                x2 = flat[o:o + c]
                o += dw * c
                x3 = flat[o:o + c]
                o += dw * c
                x4 = flat[o:o + c]
                a = row[ow]
                if i == 0:
                    for k in range(c):
                        s = x0[k] * w0[k]
                        s += x1[k] * w1[k]
                        s += x2[k] * w2[k]
                        s += x3[k] * w3[k]
                        s += x4[k] * w4[k]
                        a[k] = s
                else:
                    for k in range(c):
                        s = a[k]
                        s += x0[k] * w0[k]
                        s += x1[k] * w1[k]
                        s += x2[k] * w2[k]
                        s += x3[k] * w3[k]
                        s += x4[k] * w4[k]
                        a[k] = s
        _store_row(row, bias, y, r, act)


@numba.njit(**_NJIT)
def _row_taps3(acc, flat, o0, o1, o2, w0, w1, w2, first):
    """acc[ow] (+)= flat[o0 + ow] * w0 + flat[o1 + ow] * w1 + flat[o2 + ow] * w2, left to right; first: acc starts
    at the first product."""
    n = acc.shape[0]
    x0, x1, x2 = flat[o0:o0 + n], flat[o1:o1 + n], flat[o2:o2 + n]
    if first:
        for ow in range(n):
            s = x0[ow] * w0
            s += x1[ow] * w1
            s += x2[ow] * w2
            acc[ow] = s
    else:
        for ow in range(n):
            s = acc[ow]
            s += x0[ow] * w0
            s += x1[ow] * w1
            s += x2[ow] * w2
            acc[ow] = s


@numba.njit(**_NJIT)
def _row_taps5(acc, flat, o0, o1, o2, o3, o4, w0, w1, w2, w3, w4, first):
    """_row_taps3 for five taps."""
    n = acc.shape[0]
    x0, x1, x2, x3, x4 = flat[o0:o0 + n], flat[o1:o1 + n], flat[o2:o2 + n], flat[o3:o3 + n], flat[o4:o4 + n]
    if first:
        for ow in range(n):
            s = x0[ow] * w0
            s += x1[ow] * w1
            s += x2[ow] * w2
            s += x3[ow] * w3
            s += x4[ow] * w4
            acc[ow] = s
    else:
        for ow in range(n):
            s = acc[ow]
            s += x0[ow] * w0
            s += x1[ow] * w1
            s += x2[ow] * w2
            s += x3[ow] * w3
            s += x4[ow] * w4
            acc[ow] = s


@numba.njit(**_NJIT)
def _row_taps3_out(acc, flat, o0, o1, o2, w0, w1, w2, b, act):
    """_row_taps3's last kernel row (acc holds the earlier rows' sums), then + b and the activation code `act`
    (_activate's steps) on each sum while it is in a register: no bias and activation passes over acc."""
    n = acc.shape[0]
    x0, x1, x2 = flat[o0:o0 + n], flat[o1:o1 + n], flat[o2:o2 + n]
    t = acc.dtype.type
    zero, one, sixth, half, inf, three, six = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf), t(3.0), t(6.0)
    if act == 0:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            acc[m] = s + b
    elif act == 1:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            acc[m] = _relu(s + b, zero, inf)
    elif act == 2:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            acc[m] = _hard_swish(s + b, zero, one, sixth, half)
    else:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            acc[m] = _hard_swish_relu6(s + b, zero, three, six)


@numba.njit(**_NJIT)
def _row_taps5_out(acc, flat, o0, o1, o2, o3, o4, w0, w1, w2, w3, w4, b, act):
    """_row_taps3_out for five taps."""
    n = acc.shape[0]
    x0, x1, x2, x3, x4 = flat[o0:o0 + n], flat[o1:o1 + n], flat[o2:o2 + n], flat[o3:o3 + n], flat[o4:o4 + n]
    t = acc.dtype.type
    zero, one, sixth, half, inf, three, six = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf), t(3.0), t(6.0)
    if act == 0:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            s += x3[m] * w3
            s += x4[m] * w4
            acc[m] = s + b
    elif act == 1:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            s += x3[m] * w3
            s += x4[m] * w4
            acc[m] = _relu(s + b, zero, inf)
    elif act == 2:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            s += x3[m] * w3
            s += x4[m] * w4
            acc[m] = _hard_swish(s + b, zero, one, sixth, half)
    else:
        for m in range(n):
            s = acc[m]
            s += x0[m] * w0
            s += x1[m] * w1
            s += x2[m] * w2
            s += x3[m] * w3
            s += x4[m] * w4
            acc[m] = _hard_swish_relu6(s + b, zero, three, six)


@numba.njit(**_NJIT)
def _copy(dst, src):
    for m in range(src.shape[0]):
        dst[m] = src[m]


@numba.njit(**_NJIT)
def _plane_into_phases(xc, flat, ph, pw, sh, sw, span, blk, tmp):
    """Channel plane xc [H, W] into depthwise_planes' zero-padded phase layout: padded row R = r + ph to row phase
    R % sh, row R // sh; padded column Q = col + pw to column phase Q % sw, position Q // sw (the padding positions
    are never written: they stay zero). The row phase is counted, not divided out: a division per row cost
    more than the copy (mobilenetv3's [240, 14, 14]: 87 -> 10 us). Stride 2 over an even width: the whole plane
    de-interleaved in one loop into tmp [H * W] (a 28-float row loop left half its floats to the scalar tail),
    then plain row copies."""
    h, wd = xc.shape
    half = wd // 2
    pairs = sw == 2 and wd % 2 == 0
    if pairs:   # element 2p of the plane to tmp[p], 2p + 1 to tmp[h*half + p]; column 0's phase is pw's parity
        xf = xc.reshape(h * wd) if xc.flags.c_contiguous else np.ascontiguousarray(xc).reshape(h * wd)
        ta, tb = tmp[:h * half], tmp[h * half:h * wd]
        for p in range(h * half):
            ta[p] = xf[2 * p]
            tb[p] = xf[2 * p + 1]
        t0, t1 = (ta, tb) if pw % 2 == 0 else (tb, ta)              # phase 0 / phase 1 columns of every row
        p0, p1 = (pw + 1) // 2, pw // 2                             # their first positions in the padded row
    phase, row = ph % sh, ph // sh
    for r in range(h):
        rb = phase * sw * blk + row * span
        phase += 1
        if phase == sh:
            phase = 0
            row += 1
        if pairs:
            _copy(flat[rb + p0:rb + p0 + half], t0[r * half:(r + 1) * half])
            _copy(flat[rb + blk + p1:rb + blk + p1 + half], t1[r * half:(r + 1) * half])
            continue
        xr = xc[r]
        if sw == 1:
            dst = flat[rb + pw:rb + pw + wd]
            for m in range(wd):
                dst[m] = xr[m]
        else:
            for col in range(wd):
                cc = col + pw
                flat[rb + (cc % sw) * blk + cc // sw] = xr[col]


@numba.njit(**_NJIT)
def _run_into_plane(acc, yc, span):
    """The valid columns of each output row of the run acc [Ho * span] into yc [Ho, Wo]."""
    ho, wo = yc.shape
    for oh in range(ho):
        yr = yc[oh]
        src = acc[oh * span:oh * span + wo]
        for ow in range(wo):
            yr[ow] = src[ow]


@numba.njit(**_NJIT)
def depthwise_planes(x, taps, bias, y, kh, kw, sh, sw, dh, dw, ph, pw, act):
    # the depthwise tactics' sums (every tap, zero padding included, in (i, j) order; + bias; the activation) with
    # each tap one multiply-add over ALL output rows at once: a channel's zero-padded plane is split into its sh x sw
    # stride phases, each phase stored as rows of `span` columns, so the inputs of tap (i, j) for output (oh, ow)
    # sit at one phase's (oh + i*dh // sh) * span + ow + j*dw // sw: for all outputs one unit-stride run of
    # ho * span, the columns ow >= wo of each row computed and dropped. On 7-56-wide maps that is one loop of
    # ~100-1600 floats per tap instead of a 7-56-float loop per output row per tap, or a channels-last copy of
    # the input each way (depthwise-cl).
    c_n, h, wd = x.shape
    ho = y.shape[1]
    hp, wp = h + 2 * ph, wd + 2 * pw
    span = (wp + sw - 1) // sw
    rows = max((hp + sh - 1) // sh, ho + ((kh - 1) * dh) // sh) + 1     # + 1: the last run's dropped columns
    blk = rows * span
    n = ho * span
    flat = np.zeros(sh * sw * blk, y.dtype)
    acc = np.empty(n, y.dtype)
    tmp = np.empty(h * wd if sw == 2 else 0, y.dtype)
    ntap = kh * kw
    offs = np.empty(ntap, np.int64)
    for i in range(kh):
        for j in range(kw):
            a, q = i * dh, j * dw
            offs[i * kw + j] = ((a % sh) * sw + q % sw) * blk + (a // sh) * span + q // sw
    # kernel rows [lo, hi) read an input row for some output; the others read only zero padding rows (a 5x5 kernel
    # over PaddleOCR's 2-3-row maps: 40-60% of the taps), whose products (+-0) leave every sum unchanged except
    # the sign of an all-zero sum: skipped, and a +0 added back where a skipped product is +0 (the full sum is -0
    # only if every product is -0); a channel with a non-finite weight sums every tap (its padding products are NaN)
    lo, hi = 0, kh
    while lo < kh and (ho - 1) * sh + lo * dh < ph:
        lo += 1
    while hi > lo and (hi - 1) * dh >= ph + h:
        hi -= 1
    if lo == hi:
        lo, hi = 0, kh
    zero = y.dtype.type(0.0)
    has_bias = bias.shape[0] == c_n
    for c in range(c_n):
        _plane_into_phases(x[c], flat, ph, pw, sh, sw, span, blk, tmp)
        i0, i1 = lo, hi
        plus_zero = False
        if i1 - i0 < kh:
            for k in range(ntap):
                v = taps[k, c]
                if v - v != 0:
                    i0, i1 = 0, kh
            for k in range(ntap):
                v = taps[k, c]
                if (k < i0 * kw or k >= i1 * kw) and v >= zero and not (v == zero and np.signbit(v)):
                    plus_zero = True
        # the last kernel row with the bias and the activation on its sums (where nothing comes between them)
        fused = has_bias and not plus_zero and i1 - i0 >= 2 and (kw == 3 or kw == 5)
        for i in range(i0, i1 - 1 if fused else i1):
            k = i * kw
            if kw == 3:
                _row_taps3(acc, flat, offs[k], offs[k + 1], offs[k + 2], taps[k, c], taps[k + 1, c],
                           taps[k + 2, c], i == i0)
            elif kw == 5:
                _row_taps5(acc, flat, offs[k], offs[k + 1], offs[k + 2], offs[k + 3], offs[k + 4], taps[k, c],
                           taps[k + 1, c], taps[k + 2, c], taps[k + 3, c], taps[k + 4, c], i == i0)
            else:
                for j in range(kw):
                    src = flat[offs[k + j]:offs[k + j] + n]
                    wv = taps[k + j, c]
                    if i == i0 and j == 0:
                        for m in range(n):
                            acc[m] = src[m] * wv
                    else:
                        for m in range(n):
                            acc[m] += src[m] * wv
        if fused:
            k = (i1 - 1) * kw
            if kw == 3:
                _row_taps3_out(acc, flat, offs[k], offs[k + 1], offs[k + 2], taps[k, c], taps[k + 1, c],
                               taps[k + 2, c], bias[c], act)
            else:
                _row_taps5_out(acc, flat, offs[k], offs[k + 1], offs[k + 2], offs[k + 3], offs[k + 4], taps[k, c],
                               taps[k + 1, c], taps[k + 2, c], taps[k + 3, c], taps[k + 4, c], bias[c], act)
            _run_into_plane(acc, y[c], span)
            continue
        if plus_zero:
            for m in range(n):
                acc[m] = acc[m] + zero
        if has_bias:
            b = bias[c]
            for m in range(n):
                acc[m] = acc[m] + b
        _activate(acc, act)
        _run_into_plane(acc, y[c], span)
