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
        the depthwise tactic's wide-row loop (its signature and floats in jit.py's doc), a kernel row of 3 or 5 taps
        as one loop over the output row (_row_taps3 / 5): ~10% faster on PaddleOCR's 5x5 layers.

Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

_NJIT = dict(nogil=True, cache=True, error_model="numpy")


@numba.njit(**_NJIT)
def _activate(a, act):
    """The activation codes on the vector `a`, in place, in its dtype (jit.depthwise_cl_rows_nchw's operations):
    1 RELU (numpy's clip to [0, inf]: NaN kept, -0.0 to +0.0), 2 HARD_SWISH, 3 HARD_SWISH_RELU6; 0 nothing."""
    t = a.dtype.type
    zero, one, sixth, half, inf = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf)
    three, six = t(3.0), t(6.0)
    if act == 1:
        for k in range(a.shape[0]):
            u = a[k]
            if u == u:
                u = u if u > zero else zero
                u = u if u < inf else inf
            a[k] = u
    elif act == 2:    # as activations._hard_swish
        for k in range(a.shape[0]):
            v = a[k]
            u = v * sixth
            u = u + half
            if u == u:
                u = u if u > zero else zero
                u = u if u < one else one
            a[k] = v * u
    elif act == 3:    # as activations._hard_swish_relu6
        for k in range(a.shape[0]):
            v = a[k]
            u = v + three
            if u == u:
                u = u if u > zero else zero
                u = u if u < six else six
            u = v * u
            a[k] = u / six


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
def depthwise_planes(x, taps, bias, y, kh, kw, sh, sw, dh, dw, ph, pw, act):
    # depthwise_nchw's sums from the unpadded input: each channel's plane is zero-padded into one flat scratch
    # row by row, each row split into its sw column phases (so every tap reads a unit-stride run at an offset
    # computed once per tap), then + bias and the activation (depthwise_cl_rows_nchw's codes) per output row:
    # no padded copy of the whole input, no epilogue passes. A kernel row of 3 or 5 taps is one loop over the
    # output row (_row_taps3 / 5: the partial sum stays in a register), the same sums in the same order.
    c_n, h, wd = x.shape
    ho, wo = y.shape[1], y.shape[2]
    hp, wp = h + 2 * ph, wd + 2 * pw
    span = (wp + sw - 1) // sw
    rowlen = sw * span
    flat = np.zeros(hp * rowlen + wo, y.dtype)
    acc = np.empty(wo, y.dtype)
    ntap = kh * kw
    offs = np.empty(ntap, np.int64)
    for i in range(kh):
        for j in range(kw):
            x0 = j * dw
            offs[i * kw + j] = i * dh * rowlen + (x0 % sw) * span + x0 // sw
    zero = y.dtype.type(0.0)
    has_bias = bias.shape[0] == c_n
    for c in range(c_n):
        for r in range(h):
            xr = x[c, r]
            rb = (r + ph) * rowlen
            if sw == 2:   # both column phases in one pass over the row (a de-interleave, vectorised)
                a0, a1 = (pw + 1) // 2, (wd + pw + 1) // 2        # phase 0: columns 2a - pw, a in [a0, a1)
                b0, b1 = pw // 2, (wd + pw) // 2                  # phase 1: columns 2b + 1 - pw, b in [b0, b1)
                d0 = flat[rb + a0:rb + a1]
                d1 = flat[rb + span + b0:rb + span + b1]
                s0, s1 = 2 * a0 - pw, 2 * b0 + 1 - pw
                n0, n1 = a1 - a0, b1 - b0
                nn = min(n0, n1)
                for m in range(nn):
                    d0[m] = xr[s0 + 2 * m]
                    d1[m] = xr[s1 + 2 * m]
                for m in range(nn, n0):
                    d0[m] = xr[s0 + 2 * m]
                for m in range(nn, n1):
                    d1[m] = xr[s1 + 2 * m]
                continue
            for q in range(sw):
                m0 = (pw - q + sw - 1) // sw          # the phase's first and last columns inside the row
                m1 = (wd + pw - q + sw - 1) // sw
                base = m0 * sw + q - pw
                dst = flat[rb + q * span + m0:rb + q * span + m1]
                if sw == 1:      # a constant stride: a vectorised copy (a runtime stride is not)
                    src = xr[base:base + m1 - m0]
                    for m in range(m1 - m0):
                        dst[m] = src[m]
                else:
                    for m in range(m1 - m0):
                        dst[m] = xr[base + m * sw]
        finite = True    # a non-finite weight makes its padding products NaN: such a channel sums every tap
        for k in range(ntap):
            v = taps[k, c]
            if v - v != 0:
                finite = False
        for oh in range(ho):
            rowb = oh * sh * rowlen
            # kernel rows [i0, i1) read input rows; the others read the zero padding rows, whose products
            # (+-0) leave every sum unchanged except the sign of an all-zero sum: skipped, and a +0 added back
            # where a skipped product is +0 (the full sum is -0 only if every product is -0)
            i0, i1 = 0, kh
            if finite:
                while i0 < kh and oh * sh + i0 * dh < ph:
                    i0 += 1
                while i1 > i0 and oh * sh + (i1 - 1) * dh >= ph + h:
                    i1 -= 1
                if i0 == i1:
                    i0, i1 = 0, kh
            plus_zero = False
            for k in range(i0 * kw):
                if taps[k, c] >= zero and not (taps[k, c] == zero and np.signbit(taps[k, c])):
                    plus_zero = True
            for k in range(i1 * kw, ntap):
                if taps[k, c] >= zero and not (taps[k, c] == zero and np.signbit(taps[k, c])):
                    plus_zero = True
            for i in range(i0, i1):
                k = i * kw
                if kw == 3:
                    _row_taps3(acc, flat, rowb + offs[k], rowb + offs[k + 1], rowb + offs[k + 2],
                               taps[k, c], taps[k + 1, c], taps[k + 2, c], i == i0)
                elif kw == 5:
                    _row_taps5(acc, flat, rowb + offs[k], rowb + offs[k + 1], rowb + offs[k + 2], rowb + offs[k + 3],
                               rowb + offs[k + 4], taps[k, c], taps[k + 1, c], taps[k + 2, c], taps[k + 3, c],
                               taps[k + 4, c], i == i0)
                else:
                    for j in range(kw):
                        o = rowb + offs[k + j]
                        src = flat[o:o + wo]
                        wv = taps[k + j, c]
                        if i == i0 and j == 0:
                            for ow in range(wo):
                                acc[ow] = src[ow] * wv
                        else:
                            for ow in range(wo):
                                acc[ow] += src[ow] * wv
            if plus_zero:
                for ow in range(wo):
                    acc[ow] = acc[ow] + zero
            if has_bias:
                b = bias[c]
                for ow in range(wo):
                    acc[ow] = acc[ow] + b
            _activate(acc, act)
            yr = y[c, oh]
            for ow in range(wo):
                yr[ow] = acc[ow]
