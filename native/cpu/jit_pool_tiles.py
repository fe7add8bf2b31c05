"""Max pooling over windows that tile the map exactly (window = stride, 1 or 2 taps an axis, no padding), compiled
(the `jit` extra), reached through `native.cpu.jit.kernel("max_pool_tiles")`: the max-tiles tactic
(native/cpu/kernels/pooling_tiles.py).

    max_pool_tiles(x [R * H * W], y [R * Ho * Wo], rows, wo, w, kh, kw)
        `rows` = R * Ho output rows of `wo` outputs over flat planes: output row t reads input rows t * kh (and
        t * kh + 1), each w wide; per output the max over the column taps of each input row, then over the rows,
        each pair combined as jit_pool._mx (np.maximum's: the larger, b on ties, NaN kept): the floats of
        strided-taps' compiled loop, which runs a short loop per input row and per plane (a [1, 48, 32, 16] map's
        1x2 pool: 1536 rows of 8 outputs) where this runs the planes as one flat run of rows.

Module level, so numba's disk cache finds it in the next process (native/cpu/jit_rows.py says why). Imported only
where numba is installed.
"""
from __future__ import annotations

import numba

from native.cpu.jit_pool import _mx

_NJIT = dict(nogil=True, cache=True)


@numba.njit(**_NJIT)
def max_pool_tiles(x, y, rows, wo, w, kh, kw):
    if kh == 1 and kw == 2:   # the whole map is one run of pairs
        for k in range(rows * wo):
            y[k] = _mx(x[2 * k], x[2 * k + 1])
    elif kh == 2 and kw == 2:   # slices indexed from 0 (an offset index numba might wrap keeps LLVM from vectorising)
        for t in range(rows):
            r0, r1, o = x[2 * t * w:(2 * t + 1) * w], x[(2 * t + 1) * w:(2 * t + 2) * w], y[t * wo:(t + 1) * wo]
            for k in range(wo):
                o[k] = _mx(_mx(r0[2 * k], r0[2 * k + 1]), _mx(r1[2 * k], r1[2 * k + 1]))
    elif kh == 2 and kw == 1:
        for t in range(rows):
            r0, r1, o = x[2 * t * w:(2 * t + 1) * w], x[(2 * t + 1) * w:(2 * t + 2) * w], y[t * wo:(t + 1) * wo]
            for k in range(wo):
                o[k] = _mx(r0[k], r1[k])
    else:
        for k in range(rows * wo):
            y[k] = x[k]
