"""conv1d-direct's loop with four weight rows a pass (the `jit` extra), reached through
`native.cpu.jit.kernel("conv1d_rows4" | "conv1d_rows4_padded")`: the conv1d-direct tactic
(native/cpu/kernels/conv/conv1d_direct.py).

    conv1d_rows4(x [N, C, L], wt [C*k, M], bias [M] (or empty), y [N, M, Wo], k, s, d, pre, relu)
    conv1d_rows4_padded(the same)   finite weights only

jit.py's conv1d_direct adds one (channel, tap) row's products into an [M] accumulator per pass, so the accumulator
is loaded and stored once per row (silero-vad's [1, 129, 3] -> [1, 128, 3] layer: 387 rows, 3 positions). Here each
output position first lists its in-range rows in (channel, tap) order with their inputs, then takes them four a
pass: a[m] = (((a[m] + w0[m] x0) + w1[m] x1) + w2[m] x2) + w3[m] x3, the rest one a pass. Every accumulator thus
adds the same products in the same order from zero (each product rounded, no contraction), skipping the padding's
rows as conv1d_direct does: the same floats. Then + bias, then RELU (numpy's clip rule), as conv1d_direct does.
Each position reads all the weights again, so conv1d-direct runs it for few positions only (ROWS4_MAX_POSITIONS).
conv1d_rows4_padded reads each weights row once a call: every position takes every row, a read in the padding as a
product with 0, which for a finite weight is a zero, and adding a zero to an accumulator that starts at +0 (so is
never -0: round to nearest gives -0 only for -0 + -0) changes nothing, NaN and infinities included: the same floats
again, for weights that are all finite (conv1d-direct checks them once per recipe).
Module level, so numba's disk cache finds it again (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)

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


@numba.njit(**_NJIT)
def conv1d_rows4_padded(x, wt, bias, y, k, s, d, pre, relu):
    # conv1d_rows4's sums for finite weights: a padding read as a product with 0 (w * 0 is a zero, and adding a zero
    # to an accumulator that starts at +0 and so is never -0 changes nothing), so every position takes every row,
    # four rows a pass over all the positions' accumulators: each weights row read once a call
    n_, c_n, length = x.shape
    m_n, wo = y.shape[1], y.shape[2]
    rows = c_n * k
    span = (wo - 1) * s + (k - 1) * d + 1
    xp = np.zeros((c_n, max(span, pre + length)), y.dtype)
    acc = np.empty((wo, m_n), y.dtype)
    xr = np.empty((rows, wo), y.dtype)
    zero, inf = y.dtype.type(0.0), y.dtype.type(np.inf)
    has_bias = bias.shape[0] == m_n
    for n in range(n_):
        for c in range(c_n):
            for p in range(length):
                xp[c, pre + p] = x[n, c, p]
        for c in range(c_n):   # each row's input at every position
            for t in range(k):
                for o in range(wo):
                    xr[c * k + t, o] = xp[c, o * s + t * d]
        for o in range(wo):
            for m in range(m_n):
                acc[o, m] = 0
        r0 = 0
        while r0 + 4 <= rows:
            w0, w1, w2, w3 = wt[r0], wt[r0 + 1], wt[r0 + 2], wt[r0 + 3]
            for o in range(wo):
                a = acc[o]
                x0, x1, x2, x3 = xr[r0, o], xr[r0 + 1, o], xr[r0 + 2, o], xr[r0 + 3, o]
                for m in range(m_n):
                    a[m] = (((a[m] + w0[m] * x0) + w1[m] * x1) + w2[m] * x2) + w3[m] * x3
            r0 += 4
        while r0 < rows:
            w0 = wt[r0]
            for o in range(wo):
                a = acc[o]
                x0 = xr[r0, o]
                for m in range(m_n):
                    a[m] += w0[m] * x0
            r0 += 1
        for o in range(wo):
            a = acc[o]
            if has_bias:
                for m in range(m_n):
                    a[m] = a[m] + bias[m]
            if relu:
                for m in range(m_n):
                    u = a[m]
                    if u == u:
                        u = u if u > zero else zero
                        u = u if u < inf else inf
                    a[m] = u
            for m in range(m_n):
                y[n, m, o] = a[m]
