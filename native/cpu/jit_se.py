"""The squeeze-excite block as one compiled loop (the `jit` extra), reached through `native.cpu.jit.kernel`:

    se_direct(x [N, C, S], w1t [C, M], b1 [M] (or empty), w2t [M, C], b2 [C] (or empty), act1 [k1, 3],
              act2 [k2, 3], y [N, C, S])
        per sample: the mean of each channel over S (16 float64 running sums added up, / S, rounded to float32), the two
        1x1 products as running float32 sums over the input channels in order (vectorised over the outputs: the
        weights are packed transposed), each + bias and its activations (rows of act: code, alpha, beta; 1 RELU,
        2 HARD_SIGMOID, 3 HARD_SWISH, 4 CLIP), then x * gate per channel: the se-direct tactic's own floats (not
        se-fused's numpy reduction and GEMM), one call instead of ~10 numpy passes and their Python.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)

_NJIT = dict(nogil=True, cache=True)


@numba.njit(**_NJIT)
def _activate(v, acts):
    t = v.dtype.type
    zero, one, sixth, half = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5)
    for s in range(acts.shape[0]):
        code, a, b = int(acts[s, 0]), t(acts[s, 1]), t(acts[s, 2])
        for k in range(v.shape[0]):
            u = v[k]
            if code == 1:        # RELU (NaN kept)
                u = u if (u > zero or u != u) else zero
            elif code == 2:      # HARD_SIGMOID: clip(alpha * x + beta, 0, 1)
                u = u * a + b
                if u == u:
                    u = u if u > zero else zero
                    u = u if u < one else one
            elif code == 3:      # HARD_SWISH: x * clip(x / 6 + 1/2, 0, 1)
                w = u * sixth + half
                if w == w:
                    w = w if w > zero else zero
                    w = w if w < one else one
                u = u * w
            elif code == 4:      # CLIP(alpha, beta)
                if u == u:
                    u = u if u > a else a
                    u = u if u < b else b
            v[k] = u


@numba.njit(**_NJIT)
def _dense(v, wt, bias, acts, out):
    m_n = out.shape[0]
    for m in range(m_n):
        out[m] = 0
    for k in range(wt.shape[0]):
        vk = v[k]
        row = wt[k]
        for m in range(m_n):
            out[m] += row[m] * vk
    if bias.shape[0] == m_n:
        for m in range(m_n):
            out[m] += bias[m]
    _activate(out, acts)


@numba.njit(**_NJIT)
def se_direct(x, w1t, b1, w2t, b2, act1, act2, y):
    n_, c_n, s_n = x.shape
    m_n = w1t.shape[1]
    s = np.empty(c_n, x.dtype)
    h = np.empty(m_n, x.dtype)
    g = np.empty(c_n, x.dtype)
    part = np.empty(16, np.float64)
    s16 = s_n - s_n % 16
    for n in range(n_):
        for c in range(c_n):
            row = x[n, c]
            for q in range(16):
                part[q] = 0.0
            for k0 in range(0, s16, 16):     # 16 running sums (vectorised), then added up in order
                for q in range(16):
                    part[q] += row[k0 + q]
            acc = 0.0
            for q in range(16):
                acc += part[q]
            for k in range(s16, s_n):
                acc += row[k]
            s[c] = acc / s_n
        _dense(s, w1t, b1, act1, h)
        _dense(h, w2t, b2, act2, g)
        for c in range(c_n):
            gc = g[c]
            src = x[n, c]
            dst = y[n, c]
            for k in range(s_n):
                dst[k] = src[k] * gc
