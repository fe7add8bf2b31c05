"""winograd-f2x3-jit's compiled band (jit_winograd.wino_band) as a kernel share (the `jit` extra): the tactic
winograd-f2x3-shares (native/cpu/kernels/conv/winograd_shares.py).

    wino_stage(args int64 *, code)   (a numba @cfunc: wino_stage.address; threads.kernel_shares runs it)
        one stage; part p runs wino_band over tile rows [0, SPLIT) (p 0) or [SPLIT, TH) (p 1) of one image, in
        sub-bands of ROWS tile rows, with that part's own scratch: phase split, input transform, the 16 GEMMs
        (numpy's cblas_sgemm at the address SGEMM) and the output transform with bias, residual and activation.
        The cut is fixed per layer and shape, so the floats do not depend on the thread that ran a part.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's input [C, H, W] and output
        [M, HO, WO]) are written per call by kernel_stages, RES (the sample's residual, where HAS_RES) by the caller.

Why: the tactic's bands ran on the pool's Python hand-off, whose worker starts 35-50 us after the caller (it waits
for the GIL: docs/PERFORMANCE.md, h76), on layers of 0.1-0.9 ms; a kernel share starts it in ~2 us.
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_winograd import wino_band
from native.cpu.threads import share_block

(X, Y, U, BIAS, NB, RES, HAS_RES, C, H, W, M, HO, WO, PH, PW, TH, SPLIT, ROWS, WH, ACT, SGEMM, XQ0, V0, MM0, XQ1, V1,
 MM1, NQ, NV, NMM) = range(30)
WORDS = 30


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(nogil=True, cache=True)
def _part(a, part):
    c, m, ho, wo = a[C], a[M], a[HO], a[WO]
    t0, t1 = (0, a[SPLIT]) if part == 0 else (a[SPLIT], a[TH])
    if t1 <= t0:
        return
    x = carray(_f32_at(a[X]), (c, a[H], a[W]))
    y = carray(_f32_at(a[Y]), (m, ho, wo))
    u = carray(_f32_at(a[U]), (16, m, c))
    bias = carray(_f32_at(a[BIAS]), (a[NB],))
    if a[HAS_RES]:
        res = carray(_f32_at(a[RES]), (m, ho, wo))
    else:
        res = carray(_f32_at(a[RES]), (0, 0, 0))
    base = XQ1 if part else XQ0
    xqf = carray(_f32_at(a[base]), (a[NQ],))
    vf = carray(_f32_at(a[base + 1]), (a[NV],))
    mmf = carray(_f32_at(a[base + 2]), (a[NMM],))
    wino_band(x, u, bias, y, res, a[PH], a[PW], t0, t1, a[ROWS], a[WH], a[ACT], a[SGEMM], xqf, vf, mmf)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def wino_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1)


@numba.njit(nogil=True, cache=True)
def run_part(a, part):
    """Part `part` of the block `a` (words X / Y / RES already set) on this thread."""
    _part(a, part)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
