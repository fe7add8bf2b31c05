"""The inverted-residual block as kernel shares (the `jit` extra): each stage's two halves compiled into one C
function that the caller and the CPU pool's worker call without the GIL (threads.kernel_shares,
jit_gemm_share.kernel_stages): the tactics ir-direct-shares, ir-rows-shares, ir-planes-shares
(native/cpu/kernels/inverted_residual.py).

    ir_stage(args int64 *, code)   (a numba @cfunc: ir_stage.address)
        code 2 * stage + part (+ 256: part 1 run right after part 0 on the same thread, jit_gemm_share.ALONE).
        Stage 0, part p: the expanded channels [e0, e1) of part p (cut at ESPLIT, a multiple of 16): the expand
        GEMM's columns (cblas_sgemm, the call numpy's matmul makes for x.T @ we_t[:, e0:e1]), its epilogue into the
        padded buffer, the depthwise taps with their channel sums (jit_ir). Stage 1, part p: the gate from all the
        sums (each part its own copy: both need all of it; part 1 right after part 0 reuses part 0's), the gated
        project kernel's columns [m0, m1) (cut at MSPLIT), their [S, M] GEMM columns and the NCHW store with bias
        and shortcut. ir-direct's kernels on fixed cuts: the floats do not depend on which thread ran a half (they
        differ from ir-direct's within float32 rounding: OpenBLAS's sums depend on the columns a call covers).
    With ROWS set (ir-rows-shares: large maps with few channels, where channel halves leave the depthwise loop
        short runs and OpenBLAS packs the expand GEMM's input twice), three stages: 0, the expand GEMM's rows for
        input rows [0, RSPLIT) / [RSPLIT, H) and their epilogue into the padded buffer (all channels); 1, the
        depthwise taps for output rows [0, OSPLIT) / [OSPLIT, Ho), each part's channel sums in its own row of SUMS
        [4, E]; 2, the gate from the two parts' sums added in order (rows 2 and 3: each part its own copy), then
        the project stage as above.
    With PLANES set (ir-planes-shares), ir-planes' steps on channel halves, two stages: 0, channels [0, ESPLIT) /
        [ESPLIT, E) channels-first: the expand GEMM's rows (EXPAND) with bias and activation, the depthwise planes
        (jit_dw.depthwise_planes), the channel sums; 1, the gate, the gated kernel's rows [0, MSPLIT) / [MSPLIT, M),
        their GEMM rows into the output, bias and shortcut (WE_T, G, TAPS0, YB, WP_T, WPS then hold we [E, C], the
        expanded [E, H*W], taps [kh*kw, E], the depthwise output [E, Ho, Wo], wp [M, E] and the gated [M, E]).
    block(...) -> int64 [WORDS]    the argument block (addresses and sizes) of one layer, shape and scratch set;
        words X / Y (the sample's input and output) are written per call by kernel_stages.

numba's disk cache keys ir_stage by this file only: after editing jit_ir.py, touch this one too (or clear the
cache). Imported only where numba is installed.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_dw import depthwise_planes
from native.cpu.jit_ir import (bias_act_rows, bias_residual, channel_sums, depthwise_nhwc, expanded_into_padded, gate,
                               project_out, scaled_cols, scaled_rows)
from native.cpu.threads import share_block

(X, Y, SGEMM, C, HW, E, M, S, H, W, HP, WP, CP, HO, WO, PT, PL, SH, SW, LO, HI, ACT_E, ACT_D, SE, RES, KH, KW, MID,
 ESPLIT, MSPLIT, WE_T, G, BE, XP, TAPS0, TAPS1, BD, YB, SUMS, W1T, B1, B1N, A1, A1N, W2T, B2, B2N, A2, A2N, GATE,
 WP_T, WPS, T, BP, BPN, ROWS, RSPLIT, OSPLIT, PLANES, EXPAND) = range(60)
WORDS = 60
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
def _expand_rows(a, part):
    """Stage 0 of the row split: the expand GEMM's rows for input rows [r0, r1) (all channels), their epilogue into
    the padded buffer, with the top (part 0) or bottom (part 1) border rows."""
    e, w, pt = a[E], a[W], a[PT]
    r0, r1 = (0, a[RSPLIT]) if part == 0 else (a[RSPLIT], a[H])
    if r1 > r0:
        _sgemm(a[SGEMM], _TRANS, (r1 - r0) * w, e, a[C], a[X] + 4 * r0 * w, a[HW], a[WE_T], e,
               a[G] + 4 * r0 * w * e, e)
    g = carray(_f32_at(a[G] + 4 * r0 * w * e), ((r1 - r0) * w, e))
    b0, b1 = (0, pt + r1) if part == 0 else (pt + r0, a[HP])     # the padded rows this part writes
    xp = carray(_f32_at(a[XP] + 4 * b0 * a[WP] * a[CP]), (b1 - b0, a[WP], a[CP]))
    expanded_into_padded(g, carray(_f32_at(a[BE]), (e,)), a[ACT_E], xp, pt if part == 0 else 0, a[PL], r1 - r0, w,
                         0)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _dw_rows(a, part):
    """Stage 1 of the row split: the depthwise taps for output rows [o0, o1) (all channels), their sums into the
    part's own row of SUMS."""
    e, sh = a[E], a[SH]
    o0, o1 = (0, a[OSPLIT]) if part == 0 else (a[OSPLIT], a[HO])
    sums = carray(_f64_at(a[SUMS] + 8 * e * part), (e if a[SE] else 0,))
    if o1 <= o0:
        sums[:] = 0.0
        return
    top = o0 * sh
    xp = carray(_f32_at(a[XP] + 4 * top * a[WP] * a[CP]), (a[HP] - top, a[WP], a[CP]))
    y = carray(_f32_at(a[YB] + 4 * o0 * a[WO] * a[CP]), (o1 - o0, a[WO], a[CP]))
    taps = carray(_f32_at(a[TAPS0]), (a[KH], a[KW], -(-e // 16) * 16))
    depthwise_nhwc(xp, taps, carray(_f32_at(a[BD]), (e,)), a[ACT_D], y, sh, a[SW], sums, 0, a[LO] - top,
                   a[HI] - top)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _total(a, part):
    """The row split's channel sums, part 0's plus part 1's (in that order), into the part's own row 2 + part."""
    e = a[E]
    s0, s1 = carray(_f64_at(a[SUMS]), (e,)), carray(_f64_at(a[SUMS] + 8 * e), (e,))
    out = carray(_f64_at(a[SUMS] + 8 * e * (2 + part)), (e,))
    for k in range(e):
        out[k] = s0[k] + s1[k]
    return a[SUMS] + 8 * e * (2 + part)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _project(a, part, alone, sums_at):
    e, m, s = a[E], a[M], a[S]
    m0, m1 = (0, a[MSPLIT]) if part == 0 else (a[MSPLIT], m)
    if m1 <= m0:
        return
    wps = a[WP_T]
    if a[SE]:
        mid = a[MID]
        g = carray(_f32_at(a[GATE] + 4 * e * (0 if alone else part)), (e,))
        if not alone or part == 0:   # part 1 right after part 0 on one thread: part 0's gate (the same floats)
            gate(carray(_f64_at(sums_at), (e,)), float(s), carray(_f32_at(a[W1T]), (e, mid)),
                 carray(_f32_at(a[B1]), (a[B1N],)), carray(_f64_at(a[A1]), (a[A1N], 3)),
                 carray(_f32_at(a[W2T]), (mid, e)), carray(_f32_at(a[B2]), (a[B2N],)),
                 carray(_f64_at(a[A2]), (a[A2N], 3)), g)
        scaled_cols(carray(_f32_at(a[WP_T]), (e, m)), g, carray(_f32_at(a[WPS]), (e, m)), m0, m1)
        wps = a[WPS]
    _sgemm(a[SGEMM], _NO_TRANS, s, m1 - m0, e, a[YB], a[CP], wps + 4 * m0, m, a[T] + 4 * m0, m)
    rows = a[C] if a[RES] else 0
    project_out(carray(_f32_at(a[T]), (s, m)), carray(_f32_at(a[BP]), (a[BPN],)),
                carray(_f32_at(a[X]), (rows, a[HW] if rows else 0)), carray(_f32_at(a[Y]), (m, s)), m0, m1)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _planes_dw(a, part):
    """ir-planes-shares' stage 0: channels [e0, e1) channels-first: the expand GEMM's rows (we [E, C] x x [C, H*W])
    and bias + activation, or the input's planes where there is no expand stage; the depthwise planes; the sums."""
    e, hw = a[E], a[HW]
    e0, e1 = (0, a[ESPLIT]) if part == 0 else (a[ESPLIT], e)
    n = e1 - e0
    if n <= 0:
        return
    src = a[X]
    if a[EXPAND]:
        _sgemm(a[SGEMM], _NO_TRANS, n, hw, a[C], a[WE_T] + 4 * e0 * a[C], a[C], a[X], hw, a[G] + 4 * e0 * hw, hw)
        bias_act_rows(carray(_f32_at(a[G] + 4 * e0 * hw), (n, hw)), carray(_f32_at(a[BE] + 4 * e0), (n,)), a[ACT_E])
        src = a[G]
    kh, kw = a[KH], a[KW]
    taps = carray(_f32_at(a[TAPS0]), (kh * kw, e))[:, e0:e1]
    y = carray(_f32_at(a[YB] + 4 * e0 * a[S]), (n, a[HO], a[WO]))
    depthwise_planes(carray(_f32_at(src + 4 * e0 * hw), (n, a[H], a[W])), taps, carray(_f32_at(a[BD] + 4 * e0), (n,)),
                     y, kh, kw, a[SH], a[SW], 1, 1, a[PT], a[PL], a[ACT_D])
    if a[SE]:
        channel_sums(carray(_f32_at(a[YB] + 4 * e0 * a[S]), (n, a[S])), carray(_f64_at(a[SUMS] + 8 * e0), (n,)))


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _planes_project(a, part, alone):
    """ir-planes-shares' stage 1: the gate (each part its own copy), the gated kernel's rows [m0, m1), their GEMM
    rows (wps [M, E] x y [E, S]) into the output and the bias and shortcut."""
    e, m, s = a[E], a[M], a[S]
    m0, m1 = (0, a[MSPLIT]) if part == 0 else (a[MSPLIT], m)
    if m1 <= m0:
        return
    wps = a[WP_T]
    if a[SE]:
        mid = a[MID]
        g = carray(_f32_at(a[GATE] + 4 * e * (0 if alone else part)), (e,))
        if not alone or part == 0:
            gate(carray(_f64_at(a[SUMS]), (e,)), float(s), carray(_f32_at(a[W1T]), (e, mid)),
                 carray(_f32_at(a[B1]), (a[B1N],)), carray(_f64_at(a[A1]), (a[A1N], 3)),
                 carray(_f32_at(a[W2T]), (mid, e)), carray(_f32_at(a[B2]), (a[B2N],)),
                 carray(_f64_at(a[A2]), (a[A2N], 3)), g)
        scaled_rows(carray(_f32_at(a[WP_T] + 4 * m0 * e), (m1 - m0, e)), g,
                    carray(_f32_at(a[WPS] + 4 * m0 * e), (m1 - m0, e)))
        wps = a[WPS]
    _sgemm(a[SGEMM], _NO_TRANS, m1 - m0, s, e, wps + 4 * m0 * e, e, a[YB], s, a[Y] + 4 * m0 * s, s)
    rows = (m1 - m0) if a[RES] else 0
    bias_residual(carray(_f32_at(a[Y] + 4 * m0 * s), (m1 - m0, s)),
                  carray(_f32_at(a[BP] + 4 * m0), ((m1 - m0) if a[BPN] else 0,)),
                  carray(_f32_at(a[X] + 4 * m0 * s), (rows, s if rows else 0)))


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def ir_stage(ptr, code):
    a = carray(ptr, (WORDS,))
    stage, part, alone = (code & 0xFF) >> 1, code & 1, code >= 256
    if a[PLANES]:
        if stage == 0:
            _planes_dw(a, part)
        else:
            _planes_project(a, part, alone)
    elif a[ROWS]:
        if stage == 0:
            _expand_rows(a, part)
        elif stage == 1:
            _dw_rows(a, part)
        else:
            _project(a, part, alone, _total(a, part) if a[SE] else a[SUMS])
    elif stage == 0:
        _expand_dw(a, part)
    else:
        _project(a, part, alone, a[SUMS])


def block(sgemm, dims, arrays):
    """The argument block of these words (threads.share_block), cblas_sgemm's address in SGEMM."""
    return share_block(WORDS, {**dims, SGEMM: sgemm}, arrays)
