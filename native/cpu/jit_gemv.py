"""A one-row float32 GEMM (a GEMV) on weights stored transposed, with its epilogue, as one compiled loop (the `jit`
extra), reached through `native.cpu.jit.kernel("gemv_dot")`: the gemv-dot tactic (native/cpu/kernels/matmul_gemv.py).

    gemv_dot(x [K], wt [N, K], bias [N] (or empty), has_bias, act, y [N])
        y[j] = act(dot(x, wt[j]) + bias[j]): each output one dot product over a unit-stride weights row, summed in
        vector lanes (LLVM's split of the sum, fixed per compiled kernel: `_dots` may reassociate and fuse
        multiply-adds, nothing else), then + bias, then act as packed-gemm-direct's loop (jit_gemm._act: 0 none,
        1 RELU, 2 SIGMOID by polyexp's exp), without those fast-math flags.

Why: packed-gemm-direct and OpenBLAS sweep a [K, N] weight matrix row by row, loading and storing the [N] running
sums for every k (9.1 / 8.0 us for openwakeword's [1, 1536] x [1536, 128]); one dot product per output keeps its
sum in registers and streams its weights row once: 5.2 us. Module level, so numba's disk cache finds it in the next
process (native/cpu/jit_rows.py says why). Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu.jit_gemm import _act
from native.cpu.jit_rows import _NJIT

_ZERO = np.float32(0.0)


@numba.njit(fastmath={"reassoc", "contract"}, **_NJIT)
def _dots(x, wt, y):
    """y[j] = sum of x * wt[j] in vector lanes (reassociated; no other fast-math flag: NaN and inf stay as they
    are)."""
    for j in range(wt.shape[0]):
        r = wt[j]
        s = _ZERO
        for p in range(x.shape[0]):
            s += x[p] * r[p]
        y[j] = s


@numba.njit(**_NJIT)
def gemv_dot(x, wt, bias, has_bias, act, y):
    _dots(x, wt, y)
    if has_bias:
        for j in range(y.shape[0]):
            y[j] = y[j] + bias[j]
    if act != 0:
        for j in range(y.shape[0]):
            y[j] = _act(y[j], act)
