"""A one-row float32 GEMM (a GEMV) on weights stored transposed, with its epilogue, as one compiled loop (the `jit`
extra), reached through `native.cpu.jit.kernel("gemv_dot")`: the gemv-dot tactic (native/cpu/kernels/matmul_gemv.py).

    gemv_dot(a [1, K], wt [N, K], bias [N] (or empty), has_bias, act, y [1, N])
        y[0, j] = act(dot(a[0], wt[j]) + bias[j]): each output one dot product over a unit-stride weights row, summed in
        vector lanes (LLVM's split of the sum, fixed per compiled kernel: the sums may reassociate and fuse
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

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_gemm import _act
from native.cpu.jit_rows import _NJIT

_ZERO = np.float32(0.0)


@numba.njit(**_NJIT)
def _epilogue(out, bias, has_bias, act):
    """+ bias, then the activation: compiled without fast-math flags (they are per instruction, so they stay off
    where LLVM inlines this into gemv_dot)."""
    if has_bias:
        for j in range(out.shape[0]):
            out[j] = out[j] + bias[j]
    if act != 0:
        for j in range(out.shape[0]):
            out[j] = _act(out[j], act)


@numba.njit(fastmath={"reassoc", "contract"}, **_NJIT)
def gemv_dot(a, wt, bias, has_bias, act, y):
    x, out = a[0], y[0]
    for j in range(wt.shape[0]):   # a sum per output in vector lanes (reassociated; NaN and inf stay as they are)
        r = wt[j]
        s = _ZERO
        for p in range(x.shape[0]):
            s += x[p] * r[p]
        out[j] = s
    _epilogue(out, bias, has_bias, act)
