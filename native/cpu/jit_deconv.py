"""A transposed convolution whose kernel tiles the output (kernel == stride) with few outputs a pixel, as one compiled
loop (the `jit` extra), for the deconv-tiles-jit tactic (native/cpu/kernels/conv/deconv.py says why); imported only
where numba is installed:

    deconv_tiles(x [C, H, W], w [C, T], bias [M] (or empty), y [M, H * kh, W * kw], kh, kw, act, r0, r1, acc [T, W])
        Input rows r0..r1. T = M * kh * kw, w[c, (m * kh + a) * kw + b] = kernel[c, m, a, b]. Per input row, per
        tap t: acc[t, j] = sum over c (in order, from 0: each product and sum rounded, no fused multiply-add) of
        w[c, t] * x[c, i, j] (the loop over j vectorised), then y[m, i * kh + a, j * kw + b] = act(acc[t, j] +
        bias[m]): act 0 none, 1 RELU (NaN kept), 2 SIGMOID by polyexp's exp (jit_gemm._act). The tactic's own floats.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_gemm import _act

_NJIT = dict(nogil=True, cache=True, error_model="numpy")
_ZERO = np.float32(0.0)


@numba.njit(**_NJIT)
def deconv_tiles(x, w, bias, y, kh, kw, act, r0, r1, acc):
    n_c, _, wd = x.shape
    n_t = w.shape[1]
    m_n = y.shape[0]
    has_bias = bias.shape[0] > 0
    for i in range(r0, r1):
        for t in range(n_t):
            a = acc[t]
            for j in range(wd):
                a[j] = _ZERO
        for c in range(n_c):
            xr = x[c, i]
            t = 0
            while t + 4 <= n_t:     # four taps a pass: each x loaded once for four sums
                w0, w1, w2, w3 = w[c, t], w[c, t + 1], w[c, t + 2], w[c, t + 3]
                a0, a1, a2, a3 = acc[t], acc[t + 1], acc[t + 2], acc[t + 3]
                for j in range(wd):
                    v = xr[j]
                    a0[j] = a0[j] + w0 * v
                    a1[j] = a1[j] + w1 * v
                    a2[j] = a2[j] + w2 * v
                    a3[j] = a3[j] + w3 * v
                t += 4
            for t in range(t, n_t):
                wv = w[c, t]
                a = acc[t]
                for j in range(wd):
                    a[j] = a[j] + wv * xr[j]
        for m in range(m_n):
            bv = bias[m] if has_bias else _ZERO
            for ra in range(kh):
                row = y[m, i * kh + ra]
                t0 = (m * kh + ra) * kw
                if kw == 2 and act == 0:   # the two taps of a row interleaved in one loop (two stores a pair:
                    s0, s1 = acc[t0], acc[t0 + 1]   # vectorised), one loop per activation
                    for j in range(wd):
                        row[2 * j] = s0[j] + bv
                        row[2 * j + 1] = s1[j] + bv
                elif kw == 2:
                    s0, s1 = acc[t0], acc[t0 + 1]
                    for j in range(wd):
                        row[2 * j] = _act(s0[j] + bv, act)
                        row[2 * j + 1] = _act(s1[j] + bv, act)
                else:
                    for rb in range(kw):
                        s = acc[t0 + rb]
                        for j in range(wd):
                            row[j * kw + rb] = _act(s[j] + bv, act)
