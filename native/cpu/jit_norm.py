"""Normalization's per-channel affine pass compiled (the `jit` extra), reached through
`native.cpu.jit.kernel("channel_affine")`: BatchNormalization at inference (native/cpu/kernels/norm.py's _batch).

    channel_affine(x [N, C, S], scale [C], shift [C], y [N, C, S])
        y = x * scale[c] + shift[c], the product rounded to float32, then the sum: numpy's two passes (multiply by
        the broadcast scale, then add the broadcast shift in place) in one, the same floats (numba leaves
        contraction off: no fused multiply-add). numpy's broadcast passes over a [1, 24, 76, 32] map take 12 + 8
        us; this loop ~4.

Module level, so numba's disk cache finds it in the next process (native/cpu/jit_rows.py says why). Imported only
where numba is installed.
"""
from __future__ import annotations

import numba

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_rows import _NJIT


@numba.njit(**_NJIT)
def channel_affine(x, scale, shift, y):
    n, c, s = x.shape
    for i in range(n):
        for ch in range(c):
            a, b = scale[ch], shift[ch]
            xr, yr = x[i, ch], y[i, ch]
            for k in range(s):
                yr[k] = xr[k] * a + b
