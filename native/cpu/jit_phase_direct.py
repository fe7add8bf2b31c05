"""A 3x3 stride-2 convolution's band as a register-blocked direct kernel over the input's phase planes (the `jit`
extra), for the phase-direct-s2 tactic (native/cpu/kernels/conv/phase_direct.py says why); imported only where
numba is installed.

    phase_direct_band(x [C, H, W], z [4C, L], yw [MB * 8, Q], wb [MB, 9C, 8], offs uint64 [9C], bias [M] (or
                      empty), y [M, Ho, Wo], r0, rows, ph, pw, act, m0, m1)
        Output rows r0..r0 + rows of y, channels m0..min(m1, M) (m0, m1 multiples of 8). z: the band's four
        phase planes as jit_phase_gemm.phase_rows writes them, [rows + 1, B] flat each, B = Wo + 1, row stride
        L >= (rows + 1) * B + NR. Tap q = (c, i, j) of the "wide" output pixel t = a * B + b (b = Wo: a spill,
        never read) is z.flat[offs[q] + t], offs[q] = (g(i % 2, j % 2) * C + c) * L + (i // 2) * B + j // 2 with
        g the phase's group in z (phase_rows' order (1, 0), (0, 0), (0, 1), (1, 1)). Pixels go 32 at a time (a
        panel; Q = the band's wide pixels rounded up to 32; the last panel's runs stay in their plane row by L's
        margin, and its lanes past the band read floats never used): every block of 8 output channels sweeps the
        9C runs straight from z (16 AVX-512 accumulators: 8 channels x 32 pixels; 4 channels without AVX-512)
        into yw, then y[m, r0 + a, q] = act(yw[m, a * B + q] + bias[m]) (act 0 none, 1 RELU with NaN
        kept, 2 SiLU by polyexp's exp, jit_act._silu_poly: the *-polyexp tactics' floats).

Why: jit_phase_gemm's four BLAS GEMMs have K = 4C, 2C, 2C, C (16-64 on yolov8n's first layers): each reads and
writes the whole band product, and OpenBLAS packs both operands per call. Here a panel's 9C products stay in
registers, the weights are packed once at build time and nothing is packed per call.

Numerics: each output a chain of fused multiply-adds over q = (c, i, j) in order from zero, then + bias, then the
activation: its own rounding, tolerance-tested. An output's floats depend only on its pixel and channel (not on
the band or the panels a call covers), so any split over threads gives the same floats.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_act import _silu_poly
from native.cpu.jit_panel_gemm import MR, NR, WIDE, _block
from native.cpu.jit_phase_gemm import phase_rows

ROWS = MR if WIDE else 4      # output channels a block (the weights are packed in blocks of MR either way)
_ZERO = np.float32(0.0)
_FMA = dict(nogil=True, error_model="numpy", cache=True, fastmath={"contract"})


@numba.njit(inline="always", **_FMA)
def _sweep(acc, wk, c0, src, t0, offs, k):
    """acc[r, l] = sum over q of wk[q, c0 + r] * src[t0 + offs[q] + l] for ROWS channels: fused multiply-adds in q
    order from zero. Unsigned indices (a signed one gets a negative-index check per float: no vector loop)."""
    for r in range(ROWS):
        for l in range(NR):
            acc[r, l] = _ZERO
    if WIDE:
        for q in range(k):
            a0, a1, a2, a3 = wk[q, 0], wk[q, 1], wk[q, 2], wk[q, 3]
            a4, a5, a6, a7 = wk[q, 4], wk[q, 5], wk[q, 6], wk[q, 7]
            base = t0 + offs[q]
            for l in range(NR):
                v = src[base + np.uint64(l)]
                acc[0, l] += a0 * v
                acc[1, l] += a1 * v
                acc[2, l] += a2 * v
                acc[3, l] += a3 * v
                acc[4, l] += a4 * v
                acc[5, l] += a5 * v
                acc[6, l] += a6 * v
                acc[7, l] += a7 * v
    else:
        for q in range(k):
            a0, a1, a2, a3 = wk[q, c0], wk[q, c0 + 1], wk[q, c0 + 2], wk[q, c0 + 3]
            base = t0 + offs[q]
            for l in range(NR):
                v = src[base + np.uint64(l)]
                acc[0, l] += a0 * v
                acc[1, l] += a1 * v
                acc[2, l] += a2 * v
                acc[3, l] += a3 * v


@numba.njit(inline="always", **_FMA)
def _store(acc, yw, m0, t0):
    for r in range(ROWS):
        row = yw[m0 + r]
        for l in range(NR):
            row[t0 + np.uint64(l)] = acc[r, l]


@numba.njit(**_FMA)
def _panels(wb, src, offs, k, yw, nt, m0, m1):
    """Every panel of the band, channels m0..m1 (multiples of MR) ROWS at a time, into yw (a function of its own,
    its block on its own stack: jit_conv_panels._panel says why)."""
    acc = carray(_block(), (MR, NR))
    for p in range(nt):
        t0 = np.uint64(p * NR)
        for mb in range(m0, m1, ROWS):
            _sweep(acc, wb[mb // MR], mb % MR, src, t0, offs, k)
            _store(acc, yw, mb, t0)


@numba.njit(**_FMA)
def rows_out(yw, bias, y, r0, rows, bw, act, m0, m1):
    """y[m, r0 + a, q] = act(yw[m, a * bw + q] + bias[m]) for the band's rows, channels m0..min(m1, M). Each row
    through slices indexed from range(wo) (an index LLVM cannot prove non-negative gets numba's wraparound check
    per float: a scalar loop, ~3x slower)."""
    wo = y.shape[2]
    has_bias = bias.shape[0] > 0
    for k in range(m0, min(m1, y.shape[0])):
        bv = bias[k] if has_bias else _ZERO
        for a in range(rows):
            row = y[k, r0 + a]
            src = yw[k, a * bw:a * bw + wo]
            if act == 2:
                for q in range(wo):
                    row[q] = _silu_poly(src[q] + bv)
            elif act == 1:
                for q in range(wo):
                    v = src[q] + bv
                    t = v if v > _ZERO else _ZERO
                    row[q] = v if v != v else t
            else:
                for q in range(wo):
                    row[q] = src[q] + bv


@numba.njit(**_FMA)
def phase_direct_band(x, z, yw, wb, offs, bias, y, r0, rows, ph, pw, act, m0, m1):
    bw = y.shape[2] + 1
    phase_rows(x, z, r0, rows, bw, ph, pw)
    _panels(wb, z.reshape(-1), offs, offs.shape[0], yw, -(-(rows * bw) // NR), m0, m1)
    rows_out(yw, bias, y, r0, rows, bw, act, m0, m1)


@numba.njit(nogil=True, cache=True)
def padded_rows(x, z, r0, rows, bw, pt, pl):
    """z[c, a * bw + b] = x[c, r0 + a - pt, b - pl] (0 outside x) for a < rows: the band's rows of the zero-padded
    input, flat at z's row stride (bw >= W + pl; unsigned indices, as phase_rows)."""
    n_c, h, w = x.shape
    big = z.shape[1]
    zf = z.reshape(-1)
    xf = x.reshape(-1)
    n = max(0, min(w, bw - pl))
    for c in range(n_c):
        for a in range(rows):
            iy = r0 + a - pt
            d = np.uint64(c * big + a * bw)
            if iy < 0 or iy >= h:
                for k in range(bw):
                    zf[d + np.uint64(k)] = _ZERO
                continue
            for k in range(pl):
                zf[d + np.uint64(k)] = _ZERO
            s0 = np.uint64((c * h + iy) * w)
            dd = d + np.uint64(pl)
            for k in range(n):
                zf[dd + np.uint64(k)] = xf[s0 + np.uint64(k)]
            for k in range(pl + n, bw):
                zf[d + np.uint64(k)] = _ZERO


@numba.njit(**_FMA)
def padded_direct_band(x, z, yw, wb, offs, bias, y, r0, rows, kh, kw, pt, pl, act, m0, m1):
    """Stride 1: phase_direct_band's kernel and epilogue over the band's rows of the zero-padded input
    (`padded_rows`, bw = Wo + kw - 1 wide; tap (c, i, j) at offs = c * L + i * bw + j)."""
    bw = y.shape[2] + kw - 1
    padded_rows(x, z, r0, rows + kh - 1, bw, pt, pl)
    _panels(wb, z.reshape(-1), offs, offs.shape[0], yw, -(-(rows * bw) // NR), m0, m1)
    rows_out(yw, bias, y, r0, rows, bw, act, m0, m1)
