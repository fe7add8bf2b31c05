"""ir-direct's block as a kernel share (the `jit` extra): both halves of each stage compiled into one C function the
CPU pool's worker calls without the GIL (native/cpu/threads.kernel_shares, jit_gemm_share.kernel_stages).

    ir_stage(args int64 *, code)   (a numba @cfunc: ir_stage.address)
        code 2 * stage + part (+ 256: the caller runs part 1 right after part 0, jit_gemm_share.ALONE). Stage 0, part p: the expanded channels [e0, e1) of part p (cut at ESPLIT, a multiple
        of 16): the expand GEMM's columns (cblas_sgemm, the call numpy's matmul makes for x.T @ we_t), its
        epilogue into the padded buffer and the depthwise taps with their channel sums (jit_ir). Stage 1, part p:
        the gate from all the sums (each part its own copy: the gate is small, and both need all of it; part 1 after
        part 0 on one thread reuses part 0's), the
        gated project kernel's columns [m0, m1) (cut at MSPLIT), their [S, M] GEMM columns and the NCHW store with
        bias and shortcut. The same kernels, operands and BLAS calls as ir-direct's inline path, so the same floats
        wherever OpenBLAS's column blocks are (tests/backends/test_ir_share.py).
    block(...) -> int64 [WORDS]    the argument block (addresses and sizes) of one layer, shape and scratch set;
        words X / Y (the sample's input and output) are written per call by kernel_stages.

numba's disk cache keys ir_stage by this file only: after editing jit_ir.py, touch this one too (or clear the
cache). Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu.jit_ir import depthwise_nhwc, expanded_into_padded, gate, project_out, scaled_cols

(X, Y, SGEMM, C, HW, E, M, S, H, W, HP, WP, CP, HO, WO, PT, PL, SH, SW, LO, HI, ACT_E, ACT_D, SE, RES, KH, KW, MID,
 ESPLIT, MSPLIT, WE_T, G, BE, XP, TAPS0, TAPS1, BD, YB, SUMS, W1T, B1, B1N, A1, A1N, W2T, B2, B2N, A2, A2N, GATE,
 WP_T, WPS, T, BP, BPN) = range(55)
WORDS = 55
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@intrinsic
def _f64_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float64)(addr), codegen


@intrinsic
def _sgemm(typingctx, fn, ta, m, n, k, a, lda, b, ldb, c, ldc):
    """cblas_sgemm(RowMajor, ta, NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc) through the address `fn` (numpy's
    64-bit-integer OpenBLAS, as jit_gemm_share._sgemm)."""
    sig = types.void(fn, ta, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, p, i64, p, i64, f32, p, i64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        ta_, m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[1:]
        builder.call(f, [ir.Constant(i32, _ROW_MAJOR), builder.trunc(ta_, i32), ir.Constant(i32, _NO_TRANS),
                         m_, n_, k_, ir.Constant(f32, 1.0), builder.inttoptr(a_, p), lda_, builder.inttoptr(b_, p),
                         ldb_, ir.Constant(f32, 0.0), builder.inttoptr(c_, p), ldc_])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _expand_dw(a, part):
    e = a[E]
    e0, e1 = (0, a[ESPLIT]) if part == 0 else (a[ESPLIT], e)
    n = e1 - e0
    if n <= 0:
        return
    _sgemm(a[SGEMM], _TRANS, a[HW], n, a[C], a[X], a[HW], a[WE_T] + 4 * e0, e, a[G] + 4 * e0, e)
    g = carray(_f32_at(a[G]), (a[HW], e))
    xp = carray(_f32_at(a[XP]), (a[HP], a[WP], a[CP]))
    expanded_into_padded(g, carray(_f32_at(a[BE] + 4 * e0), (n,)), a[ACT_E], xp, a[PT], a[PL], a[H], a[W], e0)
    taps = carray(_f32_at(a[TAPS0 + part]), (a[KH], a[KW], -(-n // 16) * 16))
    y = carray(_f32_at(a[YB]), (a[HO], a[WO], a[CP]))
    sums = carray(_f64_at(a[SUMS] + 8 * e0), (n if a[SE] else 0,))
    depthwise_nhwc(xp, taps, carray(_f32_at(a[BD] + 4 * e0), (n,)), a[ACT_D], y, a[SH], a[SW], sums, e0, a[LO],
                   a[HI])


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _project(a, part, alone):
    e, m, s = a[E], a[M], a[S]
    m0, m1 = (0, a[MSPLIT]) if part == 0 else (a[MSPLIT], m)
    if m1 <= m0:
        return
    wps = a[WP_T]
    if a[SE]:
        mid = a[MID]
        g = carray(_f32_at(a[GATE] + 4 * e * (0 if alone else part)), (e,))
        if not alone or part == 0:   # part 1 right after part 0 on one thread: part 0's gate (the same floats)
            gate(carray(_f64_at(a[SUMS]), (e,)), float(s), carray(_f32_at(a[W1T]), (e, mid)),
                 carray(_f32_at(a[B1]), (a[B1N],)), carray(_f64_at(a[A1]), (a[A1N], 3)),
                 carray(_f32_at(a[W2T]), (mid, e)), carray(_f32_at(a[B2]), (a[B2N],)),
                 carray(_f64_at(a[A2]), (a[A2N], 3)), g)
        scaled_cols(carray(_f32_at(a[WP_T]), (e, m)), g, carray(_f32_at(a[WPS]), (e, m)), m0, m1)
        wps = a[WPS]
    _sgemm(a[SGEMM], _NO_TRANS, s, m1 - m0, e, a[YB], a[CP], wps + 4 * m0, m, a[T] + 4 * m0, m)
    rows = a[C] if a[RES] else 0
    project_out(carray(_f32_at(a[T]), (s, m)), carray(_f32_at(a[BP]), (a[BPN],)),
                carray(_f32_at(a[X]), (rows, a[HW] if rows else 0)), carray(_f32_at(a[Y]), (m, s)), m0, m1)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def ir_stage(ptr, code):
    a = carray(ptr, (WORDS,))
    if (code & 0xFF) >> 1 == 0:
        _expand_dw(a, code & 1)
    else:
        _project(a, code & 1, code >= 256)


def block(sgemm, dims, arrays):
    """The argument block: `dims` {word: int} and `arrays` {word: array} (their addresses; the caller keeps them
    alive as long as the block)."""
    out = np.zeros(WORDS, np.int64)
    out[SGEMM] = sgemm
    for k, v in dims.items():
        out[k] = int(v)
    for k, v in arrays.items():
        out[k] = v.ctypes.data
    return out
