"""A 3x3 stride-2 convolution's band as four GEMMs over the input's phase planes (the `jit` extra), for the
phase-gemm-s2 tactic (native/cpu/kernels/conv/phase_gemm.py says why); imported only where numba is installed.

    phase_gemm_band(x [C, H, W], z [4C, L], yw [M, rows * B], w0 [M, 4C], w1 [M, 2C], w2 [M, 2C], w3 [M, C],
                    bias [M] (or empty), y [M, Ho, Wo], r0, rows, ph, pw, act, res [M, Ho, Wo] (or [0, 0, 0]), sgemm)
        Output rows r0..r0 + rows of y. z: the zero-padded input's four phase planes over the band, in the order
        (1, 0), (0, 0), (0, 1), (1, 1) of (row, column) parity, each [rows + 1, B] flat (B = Wo + 1) at a row
        stride L: z[p*C + c, a*B + b] = x[c, 2(r0 + a) + r_p - ph, 2b + s_p - pw] (0 outside x). Tap (i, j) of
        output (oy, ox) then reads phase (i % 2, j % 2) at plane offset (oy - r0 + i // 2) * B + ox + j // 2: the
        nine taps are four shifts (0, 0), (0, 1), (1, 0), (1, 1) of the phases (1, 0) (0, 0) (0, 1) (1, 1), (1, 0)
        (0, 0), (0, 0) (0, 1) and (0, 0) — each a run of consecutive rows of z, so each shift is one GEMM
        w_s @ z[rows_s, shift:shift + rows * B] (OpenBLAS's cblas_sgemm at the address `sgemm`, row-major, the first
        with beta 0, the others accumulating with beta 1) into yw, whose column b = Wo of each row is a spill into
        the next row (computed, never read). Then y[m, r0 + a, q] = act(yw[m, a * B + q] + bias[m] (+ res)): act 0
        none, 1 RELU (NaN kept), 2 SiLU by polyexp's exp (jit_act._silu_poly), the residual added before it.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_act import _silu_poly

_NJIT = dict(nogil=True, cache=True, error_model="numpy")
_ZERO = np.float32(0.0)
_ROW_MAJOR, _NO_TRANS = 101, 111
# (first z row in units of C, rows in units of C, row shift, column shift) of the four GEMMs, z's phase order
# (1, 0), (0, 0), (0, 1), (1, 1)
SHIFTS = ((0, 4, 0, 0), (0, 2, 0, 1), (1, 2, 1, 0), (1, 1, 1, 1))
PHASES = ((1, 0), (0, 0), (0, 1), (1, 1))


@intrinsic
def _sgemm(typingctx, fn, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """cblas_sgemm(RowMajor, NoTrans, NoTrans, m, n, k, 1, a, lda, b, ldb, beta, c, ldc) through the address `fn`
    (64-bit integers, as numpy's scipy-openblas64: threads.sgemm_address finds it)."""
    sig = types.void(fn, m, n, k, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, p, i64, p, i64, f32, p, i64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        m_, n_, k_, a_, lda_, b_, ldb_, beta_, c_, ldc_ = args[1:]
        builder.call(f, [ir.Constant(i32, _ROW_MAJOR), ir.Constant(i32, _NO_TRANS), ir.Constant(i32, _NO_TRANS),
                         m_, n_, k_, ir.Constant(f32, 1.0), builder.inttoptr(a_, p), lda_, builder.inttoptr(b_, p),
                         ldb_, beta_, builder.inttoptr(c_, p), ldc_])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(**_NJIT)
def phase_rows(x, z, r0, rows, bw, ph, pw):
    """z's phase planes of the band (see the module docstring); z [4C, L] C-contiguous, L >= (rows + 1) * bw. z is
    zeroed first (the padding), then an input row's even and odd columns go to its two column phases in one loop
    (the even ones to phase pw % 2 from column (pw - pw % 2) / 2 on, the odd ones to the other from
    (pw + 1 - (1 - pw % 2)) / 2 on): a pair of loads and two stores, which LLVM vectorises as an interleaved access
    (~0.1 ns an element; one stride-2 loop per plane ran at ~0.4, and zero fills per row cost ~30 ns a row)."""
    n_c, h, w = x.shape
    big = z.shape[1]
    zf = z.reshape(-1)
    xf = x.reshape(-1)
    for q in range(zf.shape[0]):
        zf[q] = _ZERO
    se = pw & 1
    so = 1 - se
    be, bo = (pw - se) // 2, (pw + 1 - so) // 2
    ne = max(0, min((w + 1) // 2, bw - be))     # the even / odd columns that land in the planes
    no = max(0, min(w // 2, bw - bo))
    pairs = np.uint64(min(ne, no))
    two, one = np.uint64(2), np.uint64(1)
    for r in range(2):
        ge = (0 if se == 0 else 3) if r == 1 else (1 if se == 0 else 2)   # z's groups of phases (r, se), (r, so)
        go = (0 if so == 0 else 3) if r == 1 else (1 if so == 0 else 2)
        for c in range(n_c):
            for a in range(rows + 1):
                iy = 2 * (r0 + a) + r - ph
                if iy < 0 or iy >= h:
                    continue
                s0 = np.uint64((c * h + iy) * w)
                de = np.uint64((ge * n_c + c) * big + a * bw + be)
                do = np.uint64((go * n_c + c) * big + a * bw + bo)
                for k in range(pairs):
                    zf[de + k] = xf[s0 + two * k]
                    zf[do + k] = xf[s0 + two * k + one]
                for k in range(pairs, ne):
                    zf[de + np.uint64(k)] = xf[s0 + two * np.uint64(k)]
                for k in range(pairs, no):
                    zf[do + np.uint64(k)] = xf[s0 + two * np.uint64(k) + one]


@numba.njit(inline="always", **_NJIT)
def _act(v, act):
    if act == 1:
        t = v if v > _ZERO else _ZERO
        return v if v != v else t
    if act == 2:
        return _silu_poly(v)
    return v


@numba.njit(**_NJIT)
def phase_gemm_band(x, z, yw, w0, w1, w2, w3, bias, y, r0, rows, ph, pw, act, res, sgemm):
    n_c = x.shape[0]
    m, wo = y.shape[0], y.shape[2]
    bw = wo + 1
    phase_rows(x, z, r0, rows, bw, ph, pw)
    n = np.int64(rows * bw)
    ldz, ldy = np.int64(z.strides[0] // 4), np.int64(yw.strides[0] // 4)
    zp, yp = np.int64(z.ctypes.data), np.int64(yw.ctypes.data)
    for g in range(4):
        wg = w0 if g == 0 else (w1 if g == 1 else (w2 if g == 2 else w3))
        first, _, da, db = SHIFTS[g]
        b = zp + np.int64(4 * (first * n_c * ldz + da * bw + db))
        _sgemm(sgemm, np.int64(m), n, np.int64(wg.shape[1]), np.int64(wg.ctypes.data), np.int64(wg.strides[0] // 4),
               b, ldz, np.float32(0.0) if g == 0 else np.float32(1.0), yp, ldy)
    has_bias = bias.shape[0] > 0
    has_res = res.shape[0] > 0
    for k in range(m):
        bv = bias[k] if has_bias else _ZERO
        src = yw[k]
        for a in range(rows):
            row = y[k, r0 + a]
            base = a * bw
            if has_res:
                rr = res[k, r0 + a]
                for q in range(wo):
                    row[q] = _act((src[base + q] + bv) + rr[q], act)
            elif act != 0:
                for q in range(wo):
                    row[q] = _act(src[base + q] + bv, act)
            else:
                for q in range(wo):
                    row[q] = src[base + q] + bv
