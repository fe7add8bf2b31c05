"""A float32 GEMM on weights packed in column panels, compiled with numba (the `jit` extra): the packed-gemm-panels
tactic (native/cpu/kernels/matmul_panels.py).

    panel_gemm(a [M, K], bp [P, K, NR], bias [P * NR], has_bias, act, y [M, N], p0, p1)
        y[:, p * NR:(p + 1) * NR] for the panels p0..p1 of bp (panel p: the weights' columns p * NR.. as [K, NR],
        zero past N): each output a chain of fused multiply-adds over k in order from zero, kept in a block of
        accumulators (8 rows x NR: 16 AVX-512 registers; 4 rows without AVX-512) while the block's rows sweep the
        panel, then + bias and the activation (0 none, 1 RELU: max(v, 0) with NaN kept) on the way out. Rows past
        the last whole block (M % ROWS) are not computed: the caller runs them as a block of their own padded with
        zero rows (a second block size, or a second call site of this one, was measured to leave its accumulators
        in memory: 3-5x slower).
    panel_gemm_gelu(a, bp, bias, has_bias, tanh, y, p0, p1)
        panel_gemm's product, then the panels' columns through bias + GELU (tanh: the tanh form, else erf) by
        jit_rows.gelu_rows: polyexp's floats, as the *-polyexp tactics'.
    panel_share(job)
        one of the above from a share descriptor (jit_gemm_share runs it on the CPU pool's worker without the GIL):
        job[1:] = (-1 - M, N, K, a, bp, bias, y, p0 + (p1 << 32), act + (has_bias << 8)), the arrays' addresses
        (C-contiguous; bias [P * NR] always); job[1] < 0 tells it from a cblas_sgemm share.
    panel_descriptors(a, bp, bias, has_bias, act, y, cut, out [len(cut) - 1, 9])
        out[i] = the share of panels cut[i]..cut[i + 1] (the layout above): compiled, as reading four addresses
        through numpy's `ctypes.data` costs ~3 us each, more than a small GEMM's split gains.

Why: BERT's and GPT-2's GEMMs have 16-32 rows, for which OpenBLAS re-packs the weights on every call and, with its
core type pinned to Haswell, runs AVX2 kernels on an AVX-512 machine; this loop is compiled for the host CPU, packs
nothing at run time and runs at 100-125 GMAC/s on one Zen 5 core (OpenBLAS: 50-110). An output's floats depend only on
its row of `a` and column of the weights (not on M, the row block or the panels a call covers), so any split of
the panels over threads gives the same floats.

Module level (numba's disk cache finds it in the next process); imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import binding as llvm
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_rows import gelu_rows

NR = 32          # columns a panel: two 16-float vectors (AVX-512), four 8-float ones (AVX2)
MR = 8           # rows a block: 16 accumulator vectors of the 32 AVX-512 registers
WIDE = bool(llvm.get_host_cpu_features().get("avx512f"))   # else 4-row blocks (16 registers: 8 rows x 4 spill)
ROWS = MR if WIDE else 4
_ZERO = np.float32(0.0)
_FMA = dict(nogil=True, error_model="numpy", cache=True, fastmath={"contract"})   # a * b + c as one rounding


@intrinsic
def _block(typingctx):
    """MR * NR float32 on the stack: indexed only by constants, so LLVM keeps them in vector registers."""
    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.float32),
                                   size=context.get_constant(types.intp, MR * NR))
    return types.CPointer(types.float32)(), codegen


@intrinsic
def _f32_at(typingctx, addr):
    """The float32 pointer at an address (int64)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(inline="always", **_FMA)
def _flush(acc, rows, dst, i0, d0, bias, c0, has_bias, act):
    """The block's first `rows` rows (+ bias[c0:c0 + NR]) into dst[i0:i0 + rows, d0:d0 + NR], then RELU there.
    Every loop runs a constant NR (rows: a constant where inlined) with no branch inside, so LLVM unrolls the ones
    reading the block and keeps the block in registers (a branch per element left it in memory: 5x slower)."""
    if has_bias:
        b = bias[c0:c0 + NR]
        for r in range(rows):
            row = dst[i0 + r]
            for j in range(NR):
                row[d0 + j] = acc[r, j] + b[j]
    else:
        for r in range(rows):
            row = dst[i0 + r]
            for j in range(NR):
                row[d0 + j] = acc[r, j]
    if act == 1:
        for r in range(rows):
            row = dst[i0 + r, d0:d0 + NR]
            for j in range(NR):
                v = row[j]
                row[j] = v if not v < _ZERO else _ZERO


@numba.njit(inline="always", **_FMA)
def _sweep8(acc, a, i0, b, k):
    """acc[r] = sum over q of a[i0 + r, q] * b[q] for 8 rows: fused multiply-adds in q order from zero."""
    for r in range(8):
        for j in range(NR):
            acc[r, j] = _ZERO
    for q in range(k):
        a0, a1, a2, a3 = a[i0, q], a[i0 + 1, q], a[i0 + 2, q], a[i0 + 3, q]
        a4, a5, a6, a7 = a[i0 + 4, q], a[i0 + 5, q], a[i0 + 6, q], a[i0 + 7, q]
        for j in range(NR):
            w = b[q, j]
            acc[0, j] += a0 * w
            acc[1, j] += a1 * w
            acc[2, j] += a2 * w
            acc[3, j] += a3 * w
            acc[4, j] += a4 * w
            acc[5, j] += a5 * w
            acc[6, j] += a6 * w
            acc[7, j] += a7 * w


@numba.njit(inline="always", **_FMA)
def _sweep4(acc, a, i0, b, k):
    """_sweep8 for 4 rows (the same chain per output)."""
    for r in range(4):
        for j in range(NR):
            acc[r, j] = _ZERO
    for q in range(k):
        a0, a1, a2, a3 = a[i0, q], a[i0 + 1, q], a[i0 + 2, q], a[i0 + 3, q]
        for j in range(NR):
            w = b[q, j]
            acc[0, j] += a0 * w
            acc[1, j] += a1 * w
            acc[2, j] += a2 * w
            acc[3, j] += a3 * w


@numba.njit(**_FMA)
def panel_gemm(a, bp, bias, has_bias, act, y, p0, p1):
    m, k = a.shape
    n = y.shape[1]
    acc = carray(_block(), (MR, NR))
    tail = np.empty((m, NR), np.float32)    # a panel cut short by N: computed whole here, then its columns copied
    for p in range(p0, p1):
        b = bp[p]
        c0 = p * NR
        nv = min(NR, n - c0)
        dst, d0 = (y, c0) if nv == NR else (tail, 0)
        for i0 in range(0, m - m % ROWS, ROWS):
            if WIDE:
                _sweep8(acc, a, i0, b, k)
                _flush(acc, MR, dst, i0, d0, bias, c0, has_bias, act)
            else:
                _sweep4(acc, a, i0, b, k)
                _flush(acc, 4, dst, i0, d0, bias, c0, has_bias, act)
        if nv < NR:
            for i in range(m - m % ROWS):
                for j in range(nv):
                    y[i, c0 + j] = tail[i, j]


@numba.njit(nogil=True, error_model="numpy", cache=True)
def panel_gemm_gelu(a, bp, bias, has_bias, tanh, y, p0, p1):
    """panel_gemm's product, then bias + GELU over the panels' columns by jit_rows.gelu_rows, compiled without
    contraction: polyexp's floats (measured: with the bias added in panel_gemm, inlined here, they were not). One
    pass over whole rows after the product (per panel, 32-wide rows: 1.5x the time)."""
    m, n = y.shape
    panel_gemm(a, bp, bias, False, 0, y, p0, p1)
    gelu_rows(y[:m - m % ROWS], bias, has_bias, tanh, p0 * NR, min(n, p1 * NR))


@numba.njit(nogil=True, error_model="numpy", cache=True)
def panel_share(job):
    m, n, k = -1 - job[1], job[2], job[3]
    panels = (n + NR - 1) // NR
    a = carray(_f32_at(job[4]), (m, k))
    bp = carray(_f32_at(job[5]), (panels, k, NR))
    bias = carray(_f32_at(job[6]), (panels * NR,))
    y = carray(_f32_at(job[7]), (m, n))
    p0, p1 = job[8] & 0xFFFFFFFF, job[8] >> 32
    act, has_bias = job[9] & 0xFF, (job[9] >> 8) != 0
    if act >= 2:
        panel_gemm_gelu(a, bp, bias, has_bias, act == 3, y, p0, p1)
    else:
        panel_gemm(a, bp, bias, has_bias, act, y, p0, p1)


@numba.njit(nogil=True, cache=True)
def panel_descriptors(a, bp, bias, has_bias, act, y, cut, out):
    m, k = a.shape
    for i in range(out.shape[0]):
        d = out[i]
        d[0], d[1], d[2] = -1 - m, y.shape[1], k
        d[3], d[4] = np.int64(a.ctypes.data), np.int64(bp.ctypes.data)
        d[5], d[6] = np.int64(bias.ctypes.data), np.int64(y.ctypes.data)
        d[7] = cut[i] + (cut[i + 1] << 32)
        d[8] = act + (np.int64(has_bias) << 8)


@numba.njit(cache=True)
def panel_rows():
    """ROWS: the rows of the kernel's blocks (callers pad the last rows to one block)."""
    return ROWS
