"""A small float32 GEMM with its epilogue as one compiled loop (the `jit` extra), reached through
`native.cpu.jit.kernel("gemm_direct")`: the packed-gemm-direct tactic (native/cpu/kernels/matmul.py).

    gemm_direct(a [M, K], w [K, N], bias [N], has_bias, act, y [M, N])
        y[i] = act(sum_p a[i, p] * w[p] + bias): per row a running float32 sum over p in order from zero (each
        product and each sum rounded: numba leaves contraction off, so no fused multiply-add), the inner loop
        running along N (vectorised), then + bias, then act: 0 none, 1 RELU (max(v, 0), NaN kept), 2 SIGMOID
        (native/cpu/polyexp.py's exp of -|v|, 0 below its range: e / (1 + e) below 0, 1 / (1 + e) from 0 up: no
        cancellation, so small probabilities keep their relative precision).

Module level, so numba's disk cache finds it in the next process (native/cpu/jit_rows.py says why). Imported only
where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_rows import _LO, _NJIT, _exp

_ONE, _ZERO = np.float32(1.0), np.float32(0.0)


@numba.njit(inline="always", **_NJIT)
def _act(v, act):
    if act == 1:
        return v if not v < _ZERO else _ZERO
    if act == 2:
        if v != v:
            return v
        nv = -v if v >= _ZERO else v
        e = _exp(nv) if nv >= _LO else _ZERO
        return (_ONE if v >= _ZERO else e) / (e + _ONE)
    return v


@numba.njit(**_NJIT)
def gemm_direct(a, w, bias, has_bias, act, y):
    m, k = a.shape
    n = w.shape[1]
    k4 = k - k % 4
    for i in range(m):
        acc = y[i]
        for j in range(n):
            acc[j] = _ZERO
        for p in range(0, k4, 4):   # four steps of the sum per sweep of acc: the same order, fewer loads/stores
            a0, a1, a2, a3 = a[i, p], a[i, p + 1], a[i, p + 2], a[i, p + 3]
            w0, w1, w2, w3 = w[p], w[p + 1], w[p + 2], w[p + 3]
            for j in range(n):
                acc[j] = (((acc[j] + a0 * w0[j]) + a1 * w1[j]) + a2 * w2[j]) + a3 * w3[j]
        for p in range(k4, k):
            av = a[i, p]
            wr = w[p]
            for j in range(n):
                acc[j] = acc[j] + av * wr[j]
        if has_bias:
            for j in range(n):
                acc[j] = acc[j] + bias[j]
        if act != 0:
            for j in range(n):
                acc[j] = _act(acc[j], act)
