"""phase-direct-s2's and padded-direct-s1's bands (jit_phase_direct) from an argument block (the `jit` extra): as a
kernel share, the caller and a polling pool worker run the two halves of an image's bands at once without the GIL
(threads.kernel_shares); on one thread, `image` runs both halves in one compiled call.

    direct_stage(args int64 *, code)   (a numba @cfunc: direct_stage.address)
        part code & 1 of one image, with that part's own scratch (Z0 / YW0 or Z1 / YW1): the bands [0, HALF) (part
        0) or [HALF, BANDS) (part 1), each ROWS output rows (the last fewer), all channels; or, where BY_CHANNELS
        (a map of one band), every band for the channels [0, SPLIT) or [SPLIT, MB * 8). KH = 0: phase-direct-s2's
        bands (phase_direct_band, PH / PW the pads); KH > 0: padded-direct-s1's (padded_direct_band, a KH x KW
        stride-1 kernel, PH / PW the top / left pads).
    image(args, x [C, H, W], y [M, HO, WO])   both parts here, in order, in part 0's scratch (the same floats: an
        output's chain does not depend on the band or thread that computes it).
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y are written per call.

Module level (numba's disk cache finds it in the next process; it keys these functions by this file, so after
editing jit_phase_direct, touch this one too); imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_panel_gemm import MR
from native.cpu.jit_phase_direct import padded_direct_band, phase_direct_band
from native.cpu.threads import share_block

(X, Y, WB, OFFS, BIAS, NB, C, H, W, M, MB, HO, WO, ACT, PH, PW, ROWS, HALF, BANDS, L, Q, Z0, YW0, Z1,
 YW1, BY_CHANNELS, SPLIT, K, ZROWS, KH, KW) = range(31)
WORDS = 31


@intrinsic
def _u64_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.uint64)(addr), codegen


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(nogil=True, cache=True)
def _part(a, part, scratch):
    c, m, ho, wo, rows = a[C], a[M], a[HO], a[WO], a[ROWS]
    b0, b1 = (0, a[HALF]) if part == 0 else (a[HALF], a[BANDS])
    m0, m1 = 0, a[MB] * MR
    if a[BY_CHANNELS]:
        b0, b1 = 0, a[BANDS]
        m0, m1 = (0, a[SPLIT]) if part == 0 else (a[SPLIT], m1)
    if b1 <= b0 or m1 <= m0:
        return
    x = carray(_f32_at(a[X]), (c, a[H], a[W]))
    y = carray(_f32_at(a[Y]), (m, ho, wo))
    wb = carray(_f32_at(a[WB]), (a[MB], a[K], MR))
    offs = carray(_u64_at(a[OFFS]), (a[K],))
    bias = carray(_f32_at(a[BIAS]), (a[NB],))
    z = carray(_f32_at(a[Z1] if scratch else a[Z0]), (a[ZROWS], a[L]))
    yw = carray(_f32_at(a[YW1] if scratch else a[YW0]), (a[MB] * MR, a[Q]))
    ph, pw, act, kh, kw = a[PH], a[PW], a[ACT], a[KH], a[KW]
    for b in range(b0, b1):
        r0 = b * rows
        if kh:
            padded_direct_band(x, z, yw, wb, offs, bias, y, r0, min(rows, ho - r0), kh, kw, ph, pw, act, m0, m1)
        else:
            phase_direct_band(x, z, yw, wb, offs, bias, y, r0, min(rows, ho - r0), ph, pw, act, m0, m1)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def direct_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1, code & 1)


@numba.njit(nogil=True, cache=True)
def image(a, x, y):
    """Both parts on the calling thread, x [C, H, W] into y [M, HO, WO] (C-contiguous), in part 0's scratch (one
    band's scratch stays in L2: alternating two cost the first band of each part its misses, up to a third of
    yolov8n's first stride-2 layers)."""
    a[X] = np.int64(x.ctypes.data)
    a[Y] = np.int64(y.ctypes.data)
    _part(a, 0, 0)
    _part(a, 1, 0)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
