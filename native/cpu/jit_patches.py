"""The im2col patch copy of a large strided kernel out of its input's stride phases as one compiled loop (the `jit`
extra), for conv2d_gemm (native/cpu/kernels/conv/gemm2d.py); imported only where numba is installed:

    patches_from_phases(ph [C, sh, sw, Ah, Aw], cols [C, kh, kw, rows, Wo], r0, dh, dw)
        cols[c, i, j, r, :] = ph[c, (i dh) % sh, (j dw) % sw, r0 + r + (i dh) // sh, (j dw) // sw:][:Wo]: every tap's
        rows of output r0..r0 + rows, each a run of Wo consecutive floats of one phase plane. numpy's copy of the same
        (one assignment per tap, [C, rows, Wo] each) cost ~0.4 ms of resnet18's 7x7 stride-2 stem (49 taps x 7 bands
        of calls and a strided loop per row) for a 1.1 ms GEMM. Copies only: the same patch matrix, the same floats.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)

_NJIT = dict(nogil=True, cache=True, error_model="numpy")


@numba.njit(**_NJIT)
def patches_from_phases(ph, cols, r0, dh, dw):
    n_c, sh, sw, ah, aw = ph.shape
    kh, kw, rows, wo = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    pf = ph.reshape(-1)
    cf = cols.reshape(-1)
    d = np.uint64(0)
    n = np.uint64(wo)
    for c in range(n_c):
        for i in range(kh):
            p, a0 = (i * dh) % sh, r0 + (i * dh) // sh
            for j in range(kw):
                q, b0 = (j * dw) % sw, (j * dw) // sw
                s = np.uint64((((c * sh + p) * sw + q) * ah + a0) * aw + b0)
                for _ in range(rows):
                    for k in range(n):
                        cf[d + k] = pf[s + k]
                    d += n
                    s += np.uint64(aw)
