"""Depthwise taps channels-last with a kernel row's taps unrolled (the `jit` extra), reached through
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

Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

_NJIT = dict(nogil=True, cache=True, error_model="numpy")


@numba.njit(**_NJIT)
def _store_row(row, bias, y, r, act):
    """row [Wo, C] + bias, the activation (jit.depthwise_cl_rows_nchw's operations), into y[:, r, :]."""
    wo, c = row.shape
    t = y.dtype.type
    zero, one, sixth, half, inf = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf)
    three, six = t(3.0), t(6.0)
    has_bias = bias.shape[0] == c
    for ow in range(wo):
        a = row[ow]
        if has_bias:
            for k in range(c):
                a[k] = a[k] + bias[k]
        if act == 1:      # RELU: numpy's clip to [0, inf] (NaN kept, -0.0 to +0.0)
            for k in range(c):
                u = a[k]
                if u == u:
                    u = u if u > zero else zero
                    u = u if u < inf else inf
                a[k] = u
        elif act == 2:    # HARD_SWISH: as activations._hard_swish
            for k in range(c):
                v = a[k]
                u = v * sixth
                u = u + half
                if u == u:
                    u = u if u > zero else zero
                    u = u if u < one else one
                a[k] = v * u
        elif act == 3:    # HARD_SWISH_RELU6: as activations._hard_swish_relu6
            for k in range(c):
                v = a[k]
                u = v + three
                if u == u:
                    u = u if u > zero else zero
                    u = u if u < six else six
                u = v * u
                a[k] = u / six
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
