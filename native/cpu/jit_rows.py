"""The float32 row kernels of native/cpu/polyexp.py compiled with numba (the `jit` extra), reached through
`native.cpu.jit.kernel(name)`: gelu_rows, softmax_rows, layernorm_rows (signatures in jit.py's doc). The same floats as
polyexp's numpy passes: the same IEEE operations in the same order (no fused multiply-add: numba leaves contraction
off), the same 8-lane sums. Module-level functions and constants, so numba's on-disk cache finds them again in the
next process (a closure is keyed by its captured values, which for compiled helpers differ per process).
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from native.cpu import polyexp as px

_LO, _HI, _LOG2E, _ROUND, _LN2_HI, _LN2_LO = px.EXP_LO, px.EXP_HI, px.LOG2E, px.ROUND, px.LN2_HI, px.LN2_LO
_C6, _C5, _C4, _C3, _C2 = px.EXP_C
_ONE, _ZERO = px.ONE, px.ZERO
_AS_P, _MHALF, _TANH_C, _M2S = px.AS_P, px.MINUS_HALF, px.TANH_C, px.MINUS_TWO_SQRT_2_OVER_PI
_A0, _A1, _A2, _A3, _A4 = px.AS_HALF_A
_I127, _I23 = np.int32(127), np.int32(23)
_NJIT = dict(nogil=True, error_model="numpy", cache=True)   # numpy's error model: no division-by-zero branch


@intrinsic
def _as_float32(typingctx, bits):
    """The float32 whose bits the int32 holds (an LLVM bitcast: vectorises, where a view through an array would
    not)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@numba.njit(inline="always", **_NJIT)
def _exp(v):
    """polyexp.exp for one float32 (clamped to [EXP_LO, EXP_HI]; a NaN clamps too: the callers handle NaN)."""
    v = v if v > _LO else _LO
    v = v if v < _HI else _HI
    kf = (v * _LOG2E + _ROUND) - _ROUND
    r = v - kf * _LN2_HI
    r = r - kf * _LN2_LO
    p = _C6 * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _ONE
    p = p * r + _ONE
    return p * _as_float32((np.int32(kf) + _I127) << _I23)


@numba.njit(inline="always", **_NJIT)
def _lane_sum(row, square):
    """polyexp.lane_sum of one row (of its elements' squares, each rounded, with square)."""
    n = row.shape[0]
    full = n - n % 8
    z = row.dtype.type(0)
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z   # the 8 lanes: independent chains
    for j in range(0, full, 8):
        v0, v1, v2, v3 = row[j], row[j + 1], row[j + 2], row[j + 3]
        v4, v5, v6, v7 = row[j + 4], row[j + 5], row[j + 6], row[j + 7]
        if square:
            v0, v1, v2, v3, v4, v5, v6, v7 = v0 * v0, v1 * v1, v2 * v2, v3 * v3, v4 * v4, v5 * v5, v6 * v6, v7 * v7
        a0 += v0
        a1 += v1
        a2 += v2
        a3 += v3
        a4 += v4
        a5 += v5
        a6 += v6
        a7 += v7
    s = (a0 + a1) + (a2 + a3)
    s = s + ((a4 + a5) + (a6 + a7))
    for j in range(full, n):
        v = row[j]
        s = s + (v * v if square else v)
    return s


@numba.njit(**_NJIT)
def gelu_rows(y, bias, has_bias, tanh, c0, c1):
    m = y.shape[0]
    n = c1 - c0
    b = bias[c0:c1]
    for i in range(m):
        row = y[i, c0:c1]   # indices from 0: numba then proves them non-negative (no wraparound: vectorised)
        if has_bias:
            for j in range(n):
                row[j] = row[j] + b[j]
        if tanh:
            for j in range(n):
                x = row[j]
                u = ((x * x) * _TANH_C) * x
                u = (u + x) * _M2S
                row[j] = x / (_exp(u) + _ONE)
        else:
            for j in range(n):
                x = row[j]
                ax = abs(x)
                t = _ONE / (ax * _AS_P + _ONE)
                h = t * _A4
                h = (h + _A3) * t
                h = (h + _A2) * t
                h = (h + _A1) * t
                h = (h + _A0) * t
                h = h * _exp((ax * _MHALF) * ax)
                h = h * ax
                row[j] = (x if x > _ZERO else _ZERO) - h


@numba.njit(inline="always", **_NJIT)
def _has_nan(row):
    for j in range(row.shape[0]):
        if row[j] != row[j]:
            return True
    return False


@numba.njit(inline="always", **_NJIT)
def _row_max(row):
    """(max, False) of a row; (anything, True) when it holds a NaN. 8 lanes: independent chains."""
    n = row.shape[0]
    full = n - n % 8
    z = row.dtype.type(0)
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row.dtype.type(-np.inf)
    c0 = c1 = c2 = c3 = z                     # sums of v * 0: NaN where v is NaN or infinite
    for j in range(0, full, 8):
        v0, v1, v2, v3 = row[j], row[j + 1], row[j + 2], row[j + 3]
        v4, v5, v6, v7 = row[j + 4], row[j + 5], row[j + 6], row[j + 7]
        m0 = v0 if v0 > m0 else m0
        m1 = v1 if v1 > m1 else m1
        m2 = v2 if v2 > m2 else m2
        m3 = v3 if v3 > m3 else m3
        m4 = v4 if v4 > m4 else m4
        m5 = v5 if v5 > m5 else m5
        m6 = v6 if v6 > m6 else m6
        m7 = v7 if v7 > m7 else m7
        c0 += v0 * z + v4 * z
        c1 += v1 * z + v5 * z
        c2 += v2 * z + v6 * z
        c3 += v3 * z + v7 * z
    for j in range(full, n):
        v = row[j]
        m0 = v if v > m0 else m0
        c0 += v * z
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m0 = m4 if m4 > m0 else m0
    c = (c0 + c1) + (c2 + c3)
    # c is NaN for a NaN or an infinity (-inf: a masked entry, fine): only then look for a NaN
    return m0, c != c and _has_nan(row)


@numba.njit(**_NJIT)
def softmax_rows(s):
    m, n = s.shape
    for i in range(m):
        row = s[i]
        mx, bad = _row_max(row)
        if bad or mx == np.inf or mx == -np.inf:   # numpy's exp(x - max) is NaN across such a row
            for j in range(n):
                row[j] = np.nan
            continue
        for j in range(n):
            v = row[j] - mx
            row[j] = _ZERO if v < _LO else _exp(v)
        total = _lane_sum(row, False)
        for j in range(n):
            row[j] = row[j] / total


@numba.njit(**_NJIT)
def layernorm_rows(x, gamma, beta, eps, n_f, y, mean, inv):
    m, n = x.shape
    for i in range(m):
        row, out = x[i], y[i]
        mu = _lane_sum(row, False) / n_f
        for j in range(n):
            out[j] = row[j] - mu
        var = _lane_sum(out, True) / n_f
        iv = _ONE / np.sqrt(var + eps)
        for j in range(n):
            out[j] = ((out[j] * iv) * gamma[j]) + beta[j]
        mean[i] = mu
        inv[i] = iv


_INF = np.float32(np.inf)


@numba.njit(**_NJIT)
def layernorm_rows_relu(x, gamma, beta, eps, n_f, y, mean, inv):
    """layernorm_rows, then RELU as numpy's clip to [0, inf] (NaN kept, -0.0 to +0.0) on each output: the floats of
    the LayerNorm followed by activations.relu (fusion_epilogue.fuse_norm_activation's post-op), in one pass."""
    layernorm_rows(x, gamma, beta, eps, n_f, y, mean, inv)
    m, n = y.shape
    for i in range(m):
        out = y[i]
        for j in range(n):
            u = out[j]
            if u == u:
                u = u if u > _ZERO else _ZERO
                u = u if u < _INF else _INF
            out[j] = u
