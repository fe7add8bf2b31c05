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
        of its 16 values unit-stride: one vectorised loop per transformed plane and channel over the band's tiles.
        v[4k + l, c, z - t0 * Wh]: the 16 transformed values of each tile as 16 [C, P] planes, the right operands
        of the 16 GEMMs U[k] @ V[k]; column tj = Wh - 1 of each tile row is padding (computed, never read). xq and
        v C-contiguous (read and written on flat offsets).
    wino_out(mm [16, M, (t1 - t0) * Wh], bias [M] (or empty), y [M, Ho, Wo], t0, t1, Wh, act, res [M, Ho, Wo]
             (or [0, 0, 0]))
        Y = A^T (U V) A for those tile rows, + bias, + res (a residual add), then the activation (0 none, 1 RELU:
        max with 0, NaN kept, 2 SILU by polyexp's exp: jit_act._silu_poly), as four output phases over the band in
        long loops, then interleaved into the NCHW output rows 2t0..2t1 (rows and columns past Ho / Wo, where
        2 * tiles overshoot an odd size, are not written; with res the add and activation run as they are written).
    wino_band(x [C, H, W], u [16, M, C], bias, y [M, Ho, Wo], res, ph, pw, t0, t1, rows, Wh, act, sgemm, xqf, vf, mmf)
        a whole band of tile rows (the three above, and the 16 GEMMs as cblas_sgemm calls at the address `sgemm`)
        in one call outside the GIL: a pool worker's band then takes the GIL only to start (a band of Python calls
        took it ~10 times, and the worker's half of yolov8n's small layers started ~40 us late).

B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: only adds
and subtracts, in a fixed order (these floats are the tactic's own; tested against a float64 reference).
Module level, so numba's disk cache finds them again in the next process (native/cpu/jit_rows.py says why).
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_act import _silu_poly, _silu_row
from native.cpu.jit_phase_gemm import _sgemm

_NJIT = dict(nogil=True, cache=True, error_model="numpy")
_F32_ZERO = np.float32(0.0)


@numba.njit(**_NJIT)
def phase_split(x, xq, ph, pw):
    _split_rows(x, xq, 0, x.shape[1], ph, pw)


@numba.njit(inline="always")
def _split_rows(x, xq, i0, i1, ph, pw):
    """phase_split of x's rows i0..i1 only, as if they were all of x (a band's rows without a slice of x: a sliced
    array is typed with any layout, and its loops ran ~10% slower)."""
    # each input row's even and odd columns to their two column phases in one loop (loads 2k and 2k + 1, two
    # stores: LLVM's interleaved access, vectorised; unsigned indices, so no wrap-around checks): ~0.1-0.2 ns an
    # element against ~0.6 for one scalar store per element
    n_c, w = x.shape[0], x.shape[2]
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
        for i in range(i1 - i0):
            ii = (i + ph) >> 1
            if ii >= nh:
                break
            r = (i + ph) & 1
            ui = np.uint64(i + i0)
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
_U1 = np.uint64(1)


@numba.njit(inline="always")
def _plane(vf, o, xf, x0, y0, x1, y1, n, col, sign):
    """vf[o + q], q < n: column combination `col` of B over one row combination t = x + sign * y of B^T (sign +-1:
    exact, so x + sign * y is x + y or x - y), where (x0, y0) are the flat offsets of the row streams at even tile
    columns and (x1, y1) at odd ones: t[0] = t(x0, y0)[q], t[1] = t(x1, y1)[q], t[2] = t(x0, y0)[q + 1],
    t[3] = t(x1, y1)[q + 1]; col 0: t[0] - t[2], 1: t[1] + t[2], 2: t[2] - t[1], 3: t[1] - t[3]. Unsigned offsets:
    no wrap-around checks, so LLVM vectorises the loop."""
    if col == 0:
        for q in range(n):
            vf[o + q] = (xf[x0 + q] + sign * xf[y0 + q]) - (xf[x0 + q + _U1] + sign * xf[y0 + q + _U1])
    elif col == 1:
        for q in range(n):
            vf[o + q] = (xf[x1 + q] + sign * xf[y1 + q]) + (xf[x0 + q + _U1] + sign * xf[y0 + q + _U1])
    elif col == 2:
        for q in range(n):
            vf[o + q] = (xf[x0 + q + _U1] + sign * xf[y0 + q + _U1]) - (xf[x1 + q] + sign * xf[y1 + q])
    else:
        for q in range(n):
            vf[o + q] = (xf[x1 + q] + sign * xf[y1 + q]) - (xf[x1 + q + _U1] + sign * xf[y1 + q + _U1])


@numba.njit(**_NJIT)
def wino_in(xq, v, t0, t1):
    n_c, nh, wh = xq.shape[0], xq.shape[3], xq.shape[4]
    s = np.uint64(nh * wh)
    n = np.uint64((t1 - t0) * wh)
    p = np.uint64(v.shape[2])
    cp = np.uint64(n_c) * p
    xf, vf = xq.reshape(-1), v.reshape(-1)
    uw = np.uint64(wh)
    for c in range(n_c):
        # the four phase planes of channel c, flat from the band's first tile (tile (ti, tj) at z = ti * wh + tj): tile
        # row r of tile z is an even (r = 0, 2) or odd (1, 3) row at z (e, o) or z + wh (f, p). One loop per
        # transformed plane and channel, each reading four streams (sixteen stores in one loop: LLVM could not rule
        # out their overlap with the loads and left it scalar; views per channel and plane cost more than short
        # loops' copying: 256-ch 14x14 0.22 ms with them, 0.03 on flat offsets). Row combination k of B^T:
        # t_0 = d0 - d2, t_1 = d1 + d2, t_2 = d2 - d1, t_3 = d1 - d3, then column l of B: planes 4k + l
        e0 = np.uint64(c) * np.uint64(4) * s + np.uint64(t0 * wh)
        e1, o0, o1 = e0 + s, e0 + np.uint64(2) * s, e0 + np.uint64(3) * s
        f0, f1, p0, p1 = e0 + uw, e1 + uw, o0 + uw, o1 + uw
        oc = np.uint64(c) * p
        for col in range(4):
            uc = np.uint64(col)
            _plane(vf, uc * cp + oc, xf, e0, f0, e1, f1, n, col, _MINUS)
            _plane(vf, (np.uint64(4) + uc) * cp + oc, xf, o0, f0, o1, f1, n, col, _PLUS)
            _plane(vf, (np.uint64(8) + uc) * cp + oc, xf, f0, o0, f1, o1, n, col, _MINUS)
            _plane(vf, (np.uint64(12) + uc) * cp + oc, xf, o0, p0, o1, p1, n, col, _MINUS)


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
        elif act == 2 and not has_res:   # the four phases as one run of interleaved vectors (_act's floats)
            _silu_row(of, _F32_ZERO, False, False)
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


@numba.njit(**_NJIT)
def wino_band(x, u, bias, y, res, ph, pw, t0, t1, rows, wh, act, sgemm, xqf, vf, mmf):
    """winograd-f2x3-jit's band of tile rows t0..t1 of one image x [C, H, W] in sub-bands of `rows` tile rows, all
    outside the GIL: per sub-band the phase split, wino_in, the 16 GEMMs U[k] @ V[k] as cblas_sgemm calls through
    `sgemm` (numpy's OpenBLAS, with the arguments numpy's matmul passes it: the same floats, C, M >= 2) and wino_out
    into y [M, Ho, Wo]; u [16, M, C] C-contiguous, ph / pw the padding before the input's rows / columns. xqf, vf,
    mmf: flat float32 scratch for a sub-band's phase planes, V and U V (the caller's numpy buffers: arrays this
    large allocated in here were fresh pages each call unless the process keeps freed memory mapped, ~8x slower)."""
    c, h = x.shape[0], x.shape[1]
    m = u.shape[1]
    for b0 in range(t0, t1, rows):
        b1 = min(t1, b0 + rows)
        nt = b1 - b0
        p = nt * wh
        lo = 2 * b0 - ph
        nq = c * 4 * (nt + 2) * wh
        xq = xqf[:nq].reshape((c, 2, 2, nt + 2, wh))
        xqf[:nq] = 0.0
        _split_rows(x, xq, max(lo, 0), min(max(lo + 2 * nt + 4, 0), h), max(-lo, 0), pw)
        v = vf[:16 * c * p].reshape((16, c, p))
        wino_in(xq, v, 0, nt)
        mm = mmf[:16 * m * p].reshape((16, m, p))
        for k in range(16):
            _sgemm(sgemm, m, p, c, u[k].ctypes.data, c, v[k].ctypes.data, p, _F32_ZERO, mm[k].ctypes.data, p)
        wino_out(mm, bias, y, b0, b1, wh, act, res)
