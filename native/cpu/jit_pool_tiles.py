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
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_pool import _mx

_NJIT = dict(nogil=True, cache=True)


@numba.njit(**_NJIT)
def max_pool_tiles(x, y, rows, wo, w, kh, kw):
    if kh == 1 and kw == 2:   # the whole map is one run of pairs
        for k in range(rows * wo):
            y[k] = _mx(x[2 * k], x[2 * k + 1])
    elif kh == 2 and kw == 2:   # unsigned offsets (a signed one numba might wrap keeps LLVM from vectorising; slices
        uw, uwo = np.uint64(w), np.uint64(wo)   # per row cost ~15 ns: 4 us of [72, 28, 8]'s 1008 rows of 4)
        for t in range(rows):
            a, b, d = np.uint64(2 * t) * uw, np.uint64(2 * t + 1) * uw, np.uint64(t) * uwo
            for k in range(wo):
                u = np.uint64(2 * k)
                y[d + np.uint64(k)] = _mx(_mx(x[a + u], x[a + u + np.uint64(1)]),
                                          _mx(x[b + u], x[b + u + np.uint64(1)]))
    elif kh == 2 and kw == 1:
        uw, uwo = np.uint64(w), np.uint64(wo)
        for t in range(rows):
            a, b, d = np.uint64(2 * t) * uw, np.uint64(2 * t + 1) * uw, np.uint64(t) * uwo
            for k in range(wo):
                u = np.uint64(k)
                y[d + u] = _mx(x[a + u], x[b + u])
    else:
        for k in range(rows * wo):
            y[k] = x[k]
