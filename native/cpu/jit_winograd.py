"""Winograd F(2x2, 3x3) input and output transforms as compiled loops (the `jit` extra), for the winograd-f2x3-jit
convolution tactic (native/cpu/kernels/conv/winograd.py), reached through `native.cpu.jit.kernel(name)`:

    phase_split(x [C, H, W], xq [C, 2, 2, Nh, Wh], ph, pw)
        xq[c, r, s, i, j] = x[c, 2i + r - ph, 2j + s - pw] where that lies inside x: the zero-padded input (ph
        rows / pw columns before; xq zeroed by the caller) split into its row and column phases: each input row's
        even and odd columns in one interleaved loop (0.3-0.6x the time of numpy's four strided copies, which
        winograd.phase_planes runs without numba).
    wino_in(xq [C, 2, 2, Th + 2, Wh], v [16, C, (t1 - t0) * Wh], t0, t1)
        V = B^T d B for the 4x4 input tiles of tile rows t0..t1. xq holds the zero-padded input split into its
        row and column phases (xq[c, r, s, i, j] = padded[c, 2i + r, 2j + s], Wh = tiles per row + 1), so tile
        (ti, tj) is at the same flat offset z = ti * Wh + tj of every phase plane and a loop over z reads each
        of its 16 values unit-stride: one vectorised loop per transformed plane over the band's tiles (from
        _SPLIT_MIN tiles), else one scalar loop for all sixteen (the same operations, the same floats).
        v[4k + l, c, z - t0 * Wh]: the 16 transformed values of each tile as 16 [C, P] planes, the right operands
        of the 16 GEMMs U[k] @ V[k]; column tj = Wh - 1 of each tile row is padding (computed, never read).
    wino_out(mm [16, M, (t1 - t0) * Wh], bias [M] (or empty), y [M, Ho, Wo], t0, t1, Wh, act, res [M, Ho, Wo]
             (or [0, 0, 0]))
        Y = A^T (U V) A for those tile rows, + bias, + res (a residual add), then the activation (0 none, 1 RELU:
        max with 0, NaN kept, 2 SILU by polyexp's exp: jit_act._silu_poly), as four output phases over the band in
        long loops, then interleaved into the NCHW output rows 2t0..2t1 (rows and columns past Ho / Wo, where
        2 * tiles overshoot an odd size, are not written; with res the add and activation run as they are written).

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
def phase_split(x, xq, ph, pw):
    # each input row's even and odd columns to their two column phases in one loop (loads 2k and 2k + 1, two
    # stores: LLVM's interleaved access, vectorised; unsigned indices, so no wrap-around checks): ~0.1-0.2 ns an
    # element against ~0.6 for one scalar store per element
    n_c, h, w = x.shape
    nh, wh = xq.shape[3], xq.shape[4]
    se = pw & 1
    so = 1 - se
    be, bo = (pw - se) // 2, (pw + 1 - so) // 2
    ne = max(0, min((w + 1) // 2, wh - be))     # the even / odd columns that land in the planes
    no = max(0, min(w // 2, wh - bo))
    pairs = np.uint64(min(ne, no))
    two, one = np.uint64(2), np.uint64(1)
    for c in range(n_c):
        uc = np.uint64(c)
        for i in range(h):
            ii = (i + ph) >> 1
            if ii >= nh:
                break
            r = (i + ph) & 1
            ui = np.uint64(i)
            de = xq[c, r, se, ii, be:]
            do = xq[c, r, so, ii, bo:]
            for k in range(pairs):
                de[k] = x[uc, ui, two * k]
                do[k] = x[uc, ui, two * k + one]
            for k in range(pairs, ne):
                de[np.uint64(k)] = x[uc, ui, two * np.uint64(k)]
            for k in range(pairs, no):
                do[np.uint64(k)] = x[uc, ui, two * np.uint64(k) + one]


_PLUS, _MINUS = np.float32(1.0), np.float32(-1.0)
# tiles from which wino_in runs one vectorised loop per plane (fewer: one scalar loop costs less, one thread: 64-ch
# 20x20 0.039 ms against 0.057, 16-ch 80x80 0.117 against 0.045), and the plane distance at which the single loop's
# sixteen store streams fall into the same L1 sets (256-ch 14x14: 0.48 ms against 0.22)
_SPLIT_MIN = 192
_SET_ALIAS = 4096


@numba.njit(inline="always")
def _plane(out, x0, y0, x1, y1, n, col, sign):
    """out[q], q < n: column combination `col` of B over one row combination t = x + sign * y of B^T (sign +-1:
    exact, so x + sign * y is x + y or x - y), where (x0, y0) are the row streams at even tile columns and (x1, y1)
    at odd ones: t[0] = t(x0, y0)[q], t[1] = t(x1, y1)[q], t[2] = t(x0, y0)[q + 1], t[3] = t(x1, y1)[q + 1];
    col 0: t[0] - t[2], 1: t[1] + t[2], 2: t[2] - t[1], 3: t[1] - t[3]."""
    if col == 0:
        for q in range(n):
            out[q] = (x0[q] + sign * y0[q]) - (x0[q + 1] + sign * y0[q + 1])
    elif col == 1:
        for q in range(n):
            out[q] = (x1[q] + sign * y1[q]) + (x0[q + 1] + sign * y0[q + 1])
    elif col == 2:
        for q in range(n):
            out[q] = (x0[q + 1] + sign * y0[q + 1]) - (x1[q] + sign * y1[q])
    else:
        for q in range(n):
            out[q] = (x1[q] + sign * y1[q]) - (x1[q + 1] + sign * y1[q + 1])


@numba.njit(**_NJIT)
def wino_in(xq, v, t0, t1):
    wh = xq.shape[4]
    z0, n = t0 * wh, (t1 - t0) * wh
    for c in range(xq.shape[0]):
        # the four phase planes, flat (tile (ti, tj) at z = ti * wh + tj), from the band's first tile: tile row r
        # of tile z is an even (r = 0, 2) or odd (1, 3) row at z or z + wh. Views, so that every index is the loop
        # counter q or q + 1 (non-negative: numba checks no wrap-around and LLVM vectorises the loop)
        e0, e1 = xq[c, 0, 0].reshape(-1)[z0:], xq[c, 0, 1].reshape(-1)[z0:]
        o0, o1 = xq[c, 1, 0].reshape(-1)[z0:], xq[c, 1, 1].reshape(-1)[z0:]
        f0, f1 = xq[c, 0, 0].reshape(-1)[z0 + wh:], xq[c, 0, 1].reshape(-1)[z0 + wh:]
        p0, p1 = xq[c, 1, 0].reshape(-1)[z0 + wh:], xq[c, 1, 1].reshape(-1)[z0 + wh:]
        # one loop per transformed plane, each reading four streams: with all sixteen stores in one loop LLVM
        # could not rule out their overlap with the loads (too many runtime checks) and left the loop scalar.
        # Row combination k of B^T: t_0 = d0 - d2, t_1 = d1 + d2, t_2 = d2 - d1, t_3 = d1 - d3 (rows 0 / 2 from
        # e / f, rows 1 / 3 from o / p), then column l of B: planes 4k + l
        if n >= _SPLIT_MIN or v.strides[0] % _SET_ALIAS == 0:
            for col in range(4):
                _plane(v[col, c], e0, f0, e1, f1, n, col, _MINUS)
                _plane(v[4 + col, c], o0, f0, o1, f1, n, col, _PLUS)
                _plane(v[8 + col, c], f0, o0, f1, o1, n, col, _MINUS)
                _plane(v[12 + col, c], o0, p0, o1, p1, n, col, _MINUS)
        else:   # few tiles: one scalar loop, the same operations (sixteen short vector loops cost more)
            v0, v1, v2, v3 = v[0, c], v[1, c], v[2, c], v[3, c]
            v4, v5, v6, v7 = v[4, c], v[5, c], v[6, c], v[7, c]
            v8, v9, v10, v11 = v[8, c], v[9, c], v[10, c], v[11, c]
            v12, v13, v14, v15 = v[12, c], v[13, c], v[14, c], v[15, c]
            for q in range(n):
                d00, d01, d02, d03 = e0[q], e1[q], e0[q + 1], e1[q + 1]
                d10, d11, d12, d13 = o0[q], o1[q], o0[q + 1], o1[q + 1]
                d20, d21, d22, d23 = f0[q], f1[q], f0[q + 1], f1[q + 1]
                d30, d31, d32, d33 = p0[q], p1[q], p0[q + 1], p1[q + 1]
                # B^T along the rows (a_k), then B along the columns
                a0, a1, a2, a3 = d00 - d20, d01 - d21, d02 - d22, d03 - d23
                v0[q], v1[q], v2[q], v3[q] = a0 - a2, a1 + a2, a2 - a1, a1 - a3
                a0, a1, a2, a3 = d10 + d20, d11 + d21, d12 + d22, d13 + d23
                v4[q], v5[q], v6[q], v7[q] = a0 - a2, a1 + a2, a2 - a1, a1 - a3
                a0, a1, a2, a3 = d20 - d10, d21 - d11, d22 - d12, d23 - d13
                v8[q], v9[q], v10[q], v11[q] = a0 - a2, a1 + a2, a2 - a1, a1 - a3
                a0, a1, a2, a3 = d10 - d30, d11 - d31, d12 - d32, d13 - d33
                v12[q], v13[q], v14[q], v15[q] = a0 - a2, a1 + a2, a2 - a1, a1 - a3


@numba.njit(inline="always")
def _act(o, act):
    if act == 1:
        t = o if o > _F32_ZERO else _F32_ZERO
        return o if o != o else t
    if act == 2:
        return _silu_poly(o)
    return o


@numba.njit(**_NJIT)
def wino_out(mm, bias, y, t0, t1, wh, act, res):
    ho, wo = y.shape[1], y.shape[2]
    n = (t1 - t0) * wh
    o = np.empty((4, n), mm.dtype)
    of = o.reshape(-1)
    yf = y.reshape(-1)
    half, odd = np.uint64(wo >> 1), (wo & 1) == 1
    two, one = np.uint64(2), np.uint64(1)
    has_bias = bias.shape[0] > 0
    has_res = res.shape[0] > 0
    for m in range(y.shape[0]):
        bv = bias[m] if has_bias else _F32_ZERO
        for q in range(n):         # A^T (U V) A of every tile of the band in one loop: rows, then columns
            r0 = mm[0, m, q] + mm[4, m, q] + mm[8, m, q]
            r1 = mm[1, m, q] + mm[5, m, q] + mm[9, m, q]
            r2 = mm[2, m, q] + mm[6, m, q] + mm[10, m, q]
            r3 = mm[3, m, q] + mm[7, m, q] + mm[11, m, q]
            g0 = mm[4, m, q] - mm[8, m, q] - mm[12, m, q]
            g1 = mm[5, m, q] - mm[9, m, q] - mm[13, m, q]
            g2 = mm[6, m, q] - mm[10, m, q] - mm[14, m, q]
            g3 = mm[7, m, q] - mm[11, m, q] - mm[15, m, q]
            o[0, q] = r0 + r1 + r2 + bv
            o[1, q] = r1 - r2 - r3 + bv
            o[2, q] = g0 + g1 + g2 + bv
            o[3, q] = g1 - g2 - g3 + bv
        if act == 1 and not has_res:   # the activation over the band's outputs (one long loop per output phase)
            for k in range(4):
                for q in range(n):
                    o[k, q] = _act(o[k, q], 1)
        elif act == 2 and not has_res:
            for k in range(4):
                for q in range(n):
                    o[k, q] = _act(o[k, q], 2)
        for ti in range(t0, t1):   # the four output phases interleaved into the NCHW rows: an output row's even
            base = (ti - t0) * wh  # and odd columns from two phase rows in one loop (flat unsigned indices, two
            for a in range(2):     # loads and stores a pair: vectorised; one select per column ran scalar)
                row = 2 * ti + a
                if row >= ho:
                    break
                d = np.uint64((m * ho + row) * wo)
                e0, e1 = np.uint64(2 * a * n + base), np.uint64((2 * a + 1) * n + base)
                if has_res:        # + the residual, then the activation, as the epilogue orders them (one
                    # loop a row: per-row views for a loop per pair cost more than they saved on 7-14 wide maps)
                    for x in range(wo):
                        y[m, row, x] = _act(o[2 * a + (x & 1), base + (x >> 1)] + res[m, row, x], act)
                else:
                    for k in range(half):
                        yf[d + two * k] = of[e0 + k]
                        yf[d + two * k + one] = of[e1 + k]
                    if odd:
                        yf[d + two * half] = of[e0 + half]
