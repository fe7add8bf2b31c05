"""strided-taps' compiled 2-D max pool (jit_pool.max_pool_2d) over two halves of the planes as a kernel share (the
`jit` extra): the tactic max-pool-shares (native/cpu/kernels/pooling_shares.py).

    pool_stage(args int64 *, code)   (a numba @cfunc: pool_stage.address; threads.kernel_shares runs it)
        one stage; part p pools planes [0, SPLIT) (p 0) or [SPLIT, R) (p 1) of one image with that part's own
        column scratch, then (RELU) clips them to [0, inf] as numpy's clip does (NaN and -0.0 kept). max_pool_2d's
        floats: np.maximum's pairs in strided-taps' order; 3-wide windows at column stride 2 (resnet's stem pool)
        by _pool_3s2, the same pairs over each row's even / odd columns split first.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's input [R, H, W] and output
        [R, HO, WO]) are written per call by kernel_stages.

Why: resnet18's stem pool (3x3 / 2 over [64, 112, 112], with the ReLU moved past it) split its planes over the
pool's Python hand-off: 0.37 ms at one thread in a run, 0.29 at two (docs/PERFORMANCE.md, h76).
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_pool import _inside, _mx, max_pool_2d
from native.cpu.threads import share_block

(X, Y, R, H, W, HO, WO, KH, KW, SH, SW, DH, DW, PH, PW, SPLIT, RELU, COLS0, COLS1, EO0, EO1) = range(21)
WORDS = 21


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _clip_planes(y, r0, r1):
    zero = np.float32(0.0)
    for r in range(r0, r1):
        f = y[r].reshape(-1)
        for k in range(f.shape[0]):
            v = f[k]
            f[k] = zero if v < zero else v


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _pool_3s2(x, y, cols, ev, od, r0, r1, kh, sh, dh, ph, pw):
    """max_pool_2d for 3-wide windows at column stride 2 (dilation 1), the same pairs in the same order: each
    input row's even and odd columns split first (one unit-stride loop: LLVM's interleaved loads), so that the
    inner windows' column max is a unit-stride loop (three stride-2 loads each ran ~4x slower); the row taps as
    max_pool_2d's."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = y.shape[1], y.shape[2]
    ninf = x.dtype.type(-np.inf)
    qa, qb = _inside(w, wo, 3, 2, 1, pw)
    pa, pb = _inside(h, ho, kh, sh, dh, ph)
    n = qb - qa
    b = qa * 2 - pw
    for r in range(r0, r1):
        src = x[r]
        for i in range(h):
            row = src[i]
            for e in range(qa + wo - qb):
                q = e if e < qa else qb + e - qa
                m = ninf
                for j in range(3):
                    c = q * 2 + j - pw
                    if 0 <= c < w:
                        m = _mx(m, row[c])
                cols[i, q] = m
            if n > 0:
                seg = row[b:]
                for k in range(n):
                    ev[k] = seg[2 * k]
                    od[k] = seg[2 * k + 1]
                ev[n] = seg[2 * n]
                mid = cols[i, qa:qb]
                for k in range(n):
                    mid[k] = _mx(_mx(ev[k], od[k]), ev[k + 1])
        # then the max over the row taps: border rows tap by tap, inner rows with the common windows spelled out
        dst = y[r]
        for e in range(pa + ho - pb):
            p = e if e < pa else pb + e - pa
            acc = dst[p]
            acc[:] = ninf
            for i in range(kh):
                a = p * sh + i * dh - ph
                if 0 <= a < h:
                    ca = cols[a]
                    for q in range(wo):
                        acc[q] = _mx(acc[q], ca[q])
        if kh == 3:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1, c2 = dst[p], cols[t], cols[t + dh], cols[t + 2 * dh]
                for q in range(wo):
                    acc[q] = _mx(_mx(c0[q], c1[q]), c2[q])
        elif kh == 2:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1 = dst[p], cols[t], cols[t + dh]
                for q in range(wo):
                    acc[q] = _mx(c0[q], c1[q])
        elif kh == 5:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1, c2, c3, c4 = (dst[p], cols[t], cols[t + dh], cols[t + 2 * dh], cols[t + 3 * dh],
                                           cols[t + 4 * dh])
                for q in range(wo):
                    acc[q] = _mx(_mx(_mx(_mx(c0[q], c1[q]), c2[q]), c3[q]), c4[q])
        else:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0 = dst[p], cols[t]
                for q in range(wo):
                    acc[q] = c0[q]
                for i in range(1, kh):
                    ca = cols[t + i * dh]
                    for q in range(wo):
                        acc[q] = _mx(acc[q], ca[q])


@numba.njit(nogil=True, cache=True)
def _part(a, part):
    r0, r1 = (0, a[SPLIT]) if part == 0 else (a[SPLIT], a[R])
    if r1 <= r0:
        return
    x = carray(_f32_at(a[X]), (a[R], a[H], a[W]))
    y = carray(_f32_at(a[Y]), (a[R], a[HO], a[WO]))
    cols = carray(_f32_at(a[COLS1] if part else a[COLS0]), (a[H], a[WO]))
    if a[KW] == 3 and a[SW] == 2 and a[DW] == 1:
        eo = carray(_f32_at(a[EO1] if part else a[EO0]), (2, a[WO] + 1))
        _pool_3s2(x, y, cols, eo[0], eo[1], r0, r1, a[KH], a[SH], a[DH], a[PH], a[PW])
    else:
        max_pool_2d(x, y, cols, r0, r1, a[KH], a[KW], a[SH], a[SW], a[DH], a[DW], a[PH], a[PW])
    if a[RELU]:
        _clip_planes(y, r0, r1)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def pool_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1)


@numba.njit(nogil=True, cache=True)
def run_part(a, part):
    """Part `part` of the block `a` (words X / Y already set) on this thread."""
    _part(a, part)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
