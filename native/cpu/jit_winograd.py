"""Winograd F(2x2, 3x3) input and output transforms as compiled loops (the `jit` extra), for the winograd-f2x3-jit
convolution tactic (native/cpu/kernels/conv/winograd_jit.py):

    wino_in(xp [C, Hp, Wp], v [16, C, P], t0, t1, tw)
        V = B^T d B for the 4x4 input tiles of tile rows t0..t1 (tile (ti, tj) reads xp rows 2ti..2ti+3, columns
        2tj..2tj+3 of the zero-padded input): v[4k + j, c, (ti - t0) * tw + tj], the 16 transformed values of each
        tile as 16 [C, P] planes, the right operands of the 16 GEMMs U[k] @ V[k]. The row combination runs first
        along whole padded rows (unit stride: vectorised), then the column combination per tile.
    wino_out(mm [16, M, P], bias [M] (or empty), y [M, Ho, Wo], t0, t1, tw, act)
        Y = A^T (U V) A for those tile rows, + bias, then the activation (0 none, 1 RELU: max with 0, NaN kept,
        2 SILU by polyexp's exp: jit_act._silu_poly), written straight into the NCHW output rows 2t0..2t1 (the rows
        and columns past Ho / Wo, where 2 * tiles overshoot an odd size, are not written).

B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: only adds
and subtracts, in a fixed order (these floats are the tactic's own; tested against a float64 reference).
Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu.jit_act import _silu_poly

_NJIT = dict(nogil=True, cache=True, error_model="numpy")
_F32_ZERO = np.float32(0.0)


@numba.njit(**_NJIT)
def wino_in(xp, v, t0, t1, tw):
    wp = xp.shape[2]
    t = np.empty((4, wp), xp.dtype)
    for c in range(xp.shape[0]):
        for ti in range(t0, t1):
            r = 2 * ti
            for q in range(wp):   # B^T along the rows: four combinations of the tile's four input rows
                a0 = xp[c, r, q]
                a1 = xp[c, r + 1, q]
                a2 = xp[c, r + 2, q]
                a3 = xp[c, r + 3, q]
                t[0, q] = a0 - a2
                t[1, q] = a1 + a2
                t[2, q] = a2 - a1
                t[3, q] = a1 - a3
            base = (ti - t0) * tw
            for k in range(4):    # then B along the columns of each tile
                for tj in range(tw):
                    q = 2 * tj
                    b0 = t[k, q]
                    b1 = t[k, q + 1]
                    b2 = t[k, q + 2]
                    b3 = t[k, q + 3]
                    v[4 * k, c, base + tj] = b0 - b2
                    v[4 * k + 1, c, base + tj] = b1 + b2
                    v[4 * k + 2, c, base + tj] = b2 - b1
                    v[4 * k + 3, c, base + tj] = b1 - b3


@numba.njit(inline="always")
def _act(o, act):
    if act == 1:
        t = o if o > _F32_ZERO else _F32_ZERO
        return o if o != o else t
    if act == 2:
        return _silu_poly(o)
    return o


@numba.njit(**_NJIT)
def wino_out(mm, bias, y, t0, t1, tw, act):
    ho, wo = y.shape[1], y.shape[2]
    full = wo // 2                 # tiles whose two output columns both lie inside the output
    s = np.empty((8, tw), mm.dtype)
    has_bias = bias.shape[0] > 0
    for m in range(y.shape[0]):
        bv = bias[m] if has_bias else _F32_ZERO
        for ti in range(t0, t1):
            base = (ti - t0) * tw
            for j in range(4):     # A^T along the rows of each tile (over k of the planes 4k + j)
                for tj in range(tw):
                    p = base + tj
                    m0 = mm[j, m, p]
                    m1 = mm[4 + j, m, p]
                    m2 = mm[8 + j, m, p]
                    m3 = mm[12 + j, m, p]
                    s[j, tj] = m0 + m1 + m2
                    s[4 + j, tj] = m1 - m2 - m3
            for a in range(2):     # then A along the columns, + bias, the activation, into the output row
                row = 2 * ti + a
                if row >= ho:
                    break
                for tj in range(full):
                    c0 = s[4 * a, tj]
                    c1 = s[4 * a + 1, tj]
                    c2 = s[4 * a + 2, tj]
                    c3 = s[4 * a + 3, tj]
                    y[m, row, 2 * tj] = _act(c0 + c1 + c2 + bv, act)
                    y[m, row, 2 * tj + 1] = _act(c1 - c2 - c3 + bv, act)
                if full < tw:      # an odd width: the last tile's first column only
                    c0 = s[4 * a, full]
                    c1 = s[4 * a + 1, full]
                    c2 = s[4 * a + 2, full]
                    y[m, row, 2 * full] = _act(c0 + c1 + c2 + bv, act)
