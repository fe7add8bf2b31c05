"""conv1d-direct's loop for few output positions, four weight rows a pass (the `jit` extra), reached through
`native.cpu.jit.kernel("conv1d_rows4")`: the conv1d-direct tactic (native/cpu/kernels/conv/conv1d_direct.py).

    conv1d_rows4(x [N, C, L], wt [C*k, M], bias [M] (or empty), y [N, M, Wo], k, s, d, pre, relu)

jit.py's conv1d_direct adds one (channel, tap) row's products into an [M] accumulator per pass, so the accumulator
is loaded and stored once per row (silero-vad's [1, 129, 3] -> [1, 128, 3] layer: 387 rows, 3 positions). Here each
output position first lists its in-range rows in (channel, tap) order with their inputs, then takes them four a
pass: a[m] = (((a[m] + w0[m] x0) + w1[m] x1) + w2[m] x2) + w3[m] x3, the rest one a pass. Every accumulator thus
adds the same products in the same order from zero (each product rounded, no contraction), skipping the padding's
rows as conv1d_direct does: the same floats. Then + bias, then RELU (numpy's clip rule), as conv1d_direct does.
Each position reads all the weights again, so conv1d-direct runs it for few positions only (ROWS4_MAX_POSITIONS).
Module level, so numba's disk cache finds it again (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

_NJIT = dict(nogil=True, cache=True)


@numba.njit(**_NJIT)
def conv1d_rows4(x, wt, bias, y, k, s, d, pre, relu):
    n_, c_n, length = x.shape
    m_n, wo = y.shape[1], y.shape[2]
    acc = np.empty(m_n, y.dtype)
    idx = np.empty(c_n * k, np.int64)
    xv = np.empty(c_n * k, y.dtype)
    zero, inf = y.dtype.type(0.0), y.dtype.type(np.inf)
    has_bias = bias.shape[0] == m_n
    for n in range(n_):
        for o in range(wo):
            nv = 0
            for c in range(c_n):   # the in-range (channel, tap) rows of this position, in order, and their inputs
                for t in range(k):
                    p = o * s - pre + t * d
                    if 0 <= p < length:
                        idx[nv] = c * k + t
                        xv[nv] = x[n, c, p]
                        nv += 1
            for m in range(m_n):
                acc[m] = 0
            q = 0
            while q + 4 <= nv:
                w0, w1, w2, w3 = wt[idx[q]], wt[idx[q + 1]], wt[idx[q + 2]], wt[idx[q + 3]]
                x0, x1, x2, x3 = xv[q], xv[q + 1], xv[q + 2], xv[q + 3]
                for m in range(m_n):
                    acc[m] = (((acc[m] + w0[m] * x0) + w1[m] * x1) + w2[m] * x2) + w3[m] * x3
                q += 4
            while q < nv:
                w0 = wt[idx[q]]
                x0 = xv[q]
                for m in range(m_n):
                    acc[m] += w0[m] * x0
                q += 1
            if has_bias:
                for m in range(m_n):
                    acc[m] = acc[m] + bias[m]
            if relu:   # numpy's clip to [0, inf]: NaN kept, -0.0 to +0.0 (activations.relu's floats)
                for m in range(m_n):
                    u = acc[m]
                    if u == u:
                        u = u if u > zero else zero
                        u = u if u < inf else inf
                    acc[m] = u
            for m in range(m_n):
                y[n, m, o] = acc[m]
