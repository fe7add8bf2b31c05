"""phase-gemm-s2's bands (jit_phase_gemm.phase_gemm_band) as a kernel share (the `jit` extra): the caller and a
polling pool worker run the two halves of an image's bands at once without the GIL (threads.kernel_shares), where
the tactic's Python parts started the worker's half 35-50 us late (docs/PERFORMANCE.md, h76).

    phase_stage(args int64 *, code)   (a numba @cfunc: phase_stage.address)
        one stage; part p runs the bands [0, HALF) (p 0) or [HALF, BANDS) (p 1) of one image, each ROWS output rows
        (the last fewer), with that part's own scratch (z, yw): the same calls with the same arguments as the
        tactic's Python bands, so the same floats.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's input [C, H, W] and output
        [M, HO, WO]) are written per call by kernel_stages, RES (the sample's residual, where HAS_RES) by the caller.

Imported only where numba is installed.
"""
from __future__ import annotations

import numba
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_phase_gemm import phase_gemm_band
from native.cpu.threads import share_block

(X, Y, WT, C, H, W, M, HO, WO, BIAS, NB, RES, HAS_RES, ACT, PH, PW, ROWS, HALF, BANDS, SGEMM, Z0, YW0, Z1,
 YW1) = range(24)
WORDS = 24


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(nogil=True, cache=True)
def _part(a, part):
    c, m, ho, wo, rows = a[C], a[M], a[HO], a[WO], a[ROWS]
    b0, b1 = (0, a[HALF]) if part == 0 else (a[HALF], a[BANDS])
    if b1 <= b0:
        return
    bw = wo + 1
    x = carray(_f32_at(a[X]), (c, a[H], a[W]))
    y = carray(_f32_at(a[Y]), (m, ho, wo))
    packed = carray(_f32_at(a[WT]), (m, 9 * c))
    bias = carray(_f32_at(a[BIAS]), (a[NB],))
    if a[HAS_RES]:
        res = carray(_f32_at(a[RES]), (m, ho, wo))
    else:
        res = carray(_f32_at(a[RES]), (0, 0, 0))
    z = carray(_f32_at(a[Z1] if part else a[Z0]), (4 * c, (rows + 1) * bw + 1))
    yw = carray(_f32_at(a[YW1] if part else a[YW0]), (m, rows * bw))
    w0, w1, w2, w3 = packed[:, :4 * c], packed[:, 4 * c:6 * c], packed[:, 6 * c:8 * c], packed[:, 8 * c:]
    for b in range(b0, b1):
        r0 = b * rows
        phase_gemm_band(x, z, yw, w0, w1, w2, w3, bias, y, r0, min(rows, ho - r0), a[PH], a[PW], a[ACT], res,
                        a[SGEMM])


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def phase_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
