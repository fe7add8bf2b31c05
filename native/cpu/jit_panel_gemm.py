"""A float32 GEMM on weights packed in column panels, compiled with numba (the `jit` extra): the packed-gemm-panels
tactic (native/cpu/kernels/matmul_panels.py).

    panel_gemm(a [M, K], bp [P, K, NR], bias [P * NR], has_bias, act, y [M, N], p0, p1)
        y[:, p * NR:(p + 1) * NR] for the panels p0..p1 of bp (panel p: the weights' columns p * NR.. as [K, NR],
        zero past N): each output a chain of fused multiply-adds over k in order from zero, kept in an MR x NR
        block of accumulators (registers: 8 AVX-512 or 16 AVX2 vectors) while a row block's panel is swept, then
        + bias and the activation (0 none, 1 RELU: max(v, 0) with NaN kept) on the way out.
    panel_gemm_gelu(a, bp, bias, has_bias, tanh, y, p0, p1)
        panel_gemm's [bias +] product panel by panel, each panel's columns then through GELU (tanh: the tanh form,
        else erf) by jit_rows.gelu_rows: polyexp's floats, as the *-polyexp tactics'.

Why: BERT's and GPT-2's GEMMs have 16-32 rows, for which OpenBLAS re-packs the weights on every call and, with its
core type pinned to Haswell, runs AVX2 kernels on an AVX-512 machine; this loop is compiled for the host CPU, packs
nothing at run time and runs at ~115 GMAC/s on one Zen 5 core (OpenBLAS: 50-100). An output's floats depend only on
its row of `a` and column of the weights (not on M, the row block or the panels a call covers), so any split of
the panels over threads gives the same floats.

Module level (numba's disk cache finds it in the next process); imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu.jit_rows import gelu_rows

MR, NR = 4, 32   # the accumulator block: 4 rows x 32 columns (two 16-float vectors a row)
_ZERO = np.float32(0.0)
_FMA = dict(nogil=True, error_model="numpy", cache=True, fastmath={"contract"})   # a * b + c as one rounding


@intrinsic
def _block(typingctx):
    """MR * NR float32 on the stack: indexed only by constants, so LLVM keeps them in vector registers."""
    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.float32),
                                   size=context.get_constant(types.intp, MR * NR))
    return types.CPointer(types.float32)(), codegen


@numba.njit(inline="always", **_FMA)
def _flush(acc, rows, y, spill, i0, c0, nv, bias, has_bias, act):
    """The block's first `rows` rows (+ bias, the activation) into y[i0:i0 + rows, c0:c0 + nv]. The block is only
    read by loops of constant trip count and nothing else (straight into y, or into `spill` where N cuts the panel
    short), so that LLVM unrolls them and keeps the block in registers; bias and activation are passes over y's
    rows after (in L1)."""
    if nv == NR:
        for r in range(rows):
            row = y[i0 + r]
            for j in range(NR):
                row[c0 + j] = acc[r, j]
    else:
        for r in range(rows):
            for j in range(NR):
                spill[r, j] = acc[r, j]
        for r in range(rows):
            s, row = spill[r], y[i0 + r]
            for j in range(nv):
                row[c0 + j] = s[j]
    if has_bias or act == 1:
        b = bias[c0:c0 + nv]
        for r in range(rows):
            row = y[i0 + r, c0:c0 + nv]
            if has_bias:
                for j in range(nv):
                    row[j] = row[j] + b[j]
            if act == 1:
                for j in range(nv):
                    v = row[j]
                    row[j] = v if not v < _ZERO else _ZERO


@numba.njit(**_FMA)
def panel_gemm(a, bp, bias, has_bias, act, y, p0, p1):
    m, k = a.shape
    n = y.shape[1]
    acc = carray(_block(), (MR, NR))
    last = carray(_block(), (MR, NR))   # the last rows' (a block of its own: see _flush)
    spill = np.empty((MR, NR), np.float32)
    m4 = m - m % MR
    for p in range(p0, p1):
        b = bp[p]
        c0 = p * NR
        nv = min(NR, n - c0)
        for i0 in range(0, m4, MR):
            for r in range(MR):
                for j in range(NR):
                    acc[r, j] = _ZERO
            for q in range(k):
                a0, a1, a2, a3 = a[i0, q], a[i0 + 1, q], a[i0 + 2, q], a[i0 + 3, q]
                bq = b[q]
                for j in range(NR):
                    w = bq[j]
                    acc[0, j] += a0 * w
                    acc[1, j] += a1 * w
                    acc[2, j] += a2 * w
                    acc[3, j] += a3 * w
            _flush(acc, MR, y, spill, i0, c0, nv, bias, has_bias, act)
        for i in range(m4, m):   # the last rows one at a time: the same chain per output
            for j in range(NR):
                last[0, j] = _ZERO
            for q in range(k):
                a0 = a[i, q]
                bq = b[q]
                for j in range(NR):
                    last[0, j] += a0 * bq[j]
            _flush(last, 1, y, spill, i, c0, nv, bias, has_bias, act)


@numba.njit(nogil=True, error_model="numpy", cache=True)
def panel_gemm_gelu(a, bp, bias, has_bias, tanh, y, p0, p1):
    """panel_gemm's product for each panel, then bias + GELU over its columns by jit_rows.gelu_rows, compiled
    without contraction: polyexp's floats (measured: with the bias added in panel_gemm, inlined here, they were
    not)."""
    n = y.shape[1]
    for p in range(p0, p1):
        panel_gemm(a, bp, bias, False, 0, y, p, p + 1)
        gelu_rows(y, bias, has_bias, tanh, p * NR, min(n, (p + 1) * NR))
