"""The HardSwish / HardSigmoid kernels compiled with numba (the `jit` extra), reached through
`native.cpu.jit.kernel(name)`: hard_swish, hard_swish_inplace, hard_sigmoid, hard_sigmoid_inplace,
bias_hard_act_inplace, silu_polyexp_inplace (signatures in jit.py's doc). Module-level functions sharing one module-level clip, so numba's
on-disk cache finds them again in the next process (a closure over a compiled helper is keyed by that helper, which
differs per process: such kernels recompiled every time). Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu.jit_rows import _LO, _exp

_NJIT = dict(nogil=True, cache=True)
_F32_ONE, _F32_ZERO = np.float32(1.0), np.float32(0.0)


@numba.njit(inline="always", **_NJIT)
def _clip01(t, zero, one):
    """t clipped to [zero, one] as numpy's clip loop does: NaN stays NaN, -0.0 becomes +0.0."""
    if t != t:
        return t
    t = t if t > zero else zero
    return t if t < one else one


@numba.njit(**_NJIT)
def hard_swish(x, y):
    sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        v = x[k]
        t = v * sixth
        t = t + half
        y[k] = v * _clip01(t, zero, one)


# one array argument: with y aliasing x numba's loop cannot be vectorised (20x slower), so in place is its own kernel
@numba.njit(**_NJIT)
def hard_swish_inplace(x):
    sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        v = x[k]
        t = v * sixth
        t = t + half
        x[k] = v * _clip01(t, zero, one)


@numba.njit(inline="always", **_NJIT)
def _relu6_swish(v, three, six, zero):
    """x + 3, clipped to [0, 6] as numpy's clip loop (NaN kept), times x, / 6: each step rounded to x's type."""
    t = v + three
    if t == t:
        t = t if t > zero else zero
        t = t if t < six else six
    t = v * t
    return t / six


@numba.njit(error_model="numpy", **_NJIT)
def hard_swish_relu6(x, y):
    three, six, zero = x.dtype.type(3.0), x.dtype.type(6.0), x.dtype.type(0.0)
    for k in range(x.shape[0]):
        y[k] = _relu6_swish(x[k], three, six, zero)


@numba.njit(error_model="numpy", **_NJIT)
def hard_swish_relu6_inplace(x):
    three, six, zero = x.dtype.type(3.0), x.dtype.type(6.0), x.dtype.type(0.0)
    for k in range(x.shape[0]):
        x[k] = _relu6_swish(x[k], three, six, zero)


@numba.njit(**_NJIT)
def hard_sigmoid(x, y, alpha, beta):
    a, b = x.dtype.type(alpha), x.dtype.type(beta)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        t = x[k] * a
        t = t + b
        y[k] = _clip01(t, zero, one)


@numba.njit(**_NJIT)
def hard_sigmoid_inplace(x, alpha, beta):
    a, b = x.dtype.type(alpha), x.dtype.type(beta)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        t = x[k] * a
        t = t + b
        x[k] = _clip01(t, zero, one)


@numba.njit(**_NJIT)
def bias_hard_act_inplace(y, bias, swish, alpha, beta):
    t = y.dtype.type
    sixth, half, zero, one = t(1.0 / 6.0), t(0.5), t(0.0), t(1.0)
    a, b = t(alpha), t(beta)
    n_, c_n, s_n = y.shape
    for n in range(n_):
        for c in range(c_n):
            row = y[n, c]
            bc = bias[c]
            if swish:
                for k in range(s_n):
                    v = row[k] + bc
                    u = v * sixth
                    u = u + half
                    row[k] = v * _clip01(u, zero, one)
            else:
                for k in range(s_n):
                    u = (row[k] + bc) * a
                    u = u + b
                    row[k] = _clip01(u, zero, one)


@numba.njit(error_model="numpy", **_NJIT)
def bias_steps_inplace(y, bias, steps, res):
    # y + bias per channel (bias may be empty), then each step in order, in place on y [N, C, S]: code 1 clip to
    # [alpha, beta] as numpy's clip loop (RELU is [0, inf]), code 2 + res (same shape as y), code 3
    # HARD_SWISH_RELU6, code 4 HARD_SWISH, code 5 LEAKY_RELU with alpha, code 6 SILU_POLYEXP, code 7 SILU_POLYEXP
    # of 2x (float32 only, the caller checks): the numpy epilogue's passes (each rounded as numpy rounds it) as one
    # pass per row
    t = y.dtype.type
    three, six, zero = t(3.0), t(6.0), t(0.0)
    sixth, half, one = t(1.0 / 6.0), t(0.5), t(1.0)
    n_, c_n, s_n = y.shape
    has_bias = bias.shape[0] == c_n
    k_n = steps.shape[0]
    for n in range(n_):
        for c in range(c_n):
            row = y[n, c]
            if has_bias:
                bc = bias[c]
                for k in range(s_n):
                    row[k] = row[k] + bc
            for s in range(k_n):
                if steps[s, 0] == 1.0:
                    lo, hi = t(steps[s, 1]), t(steps[s, 2])
                    for k in range(s_n):
                        v = row[k]
                        if v == v:
                            v = v if v > lo else lo
                            v = v if v < hi else hi
                        row[k] = v
                elif steps[s, 0] == 3.0:
                    for k in range(s_n):
                        row[k] = _relu6_swish(row[k], three, six, zero)
                elif steps[s, 0] == 4.0:     # HARD_SWISH: as activations._hard_swish
                    for k in range(s_n):
                        v = row[k]
                        u = v * sixth
                        u = u + half
                        row[k] = v * _clip01(u, zero, one)
                elif steps[s, 0] == 5.0:     # LEAKY_RELU: as activations._leaky_relu (x < 0: x * alpha)
                    a = t(steps[s, 1])
                    for k in range(s_n):
                        v = row[k]
                        row[k] = v * a if v < zero else v
                elif steps[s, 0] == 6.0:     # SILU_POLYEXP (float32 only): as silu_polyexp_inplace
                    for k in range(s_n):
                        row[k] = _silu_poly(row[k])
                elif steps[s, 0] == 7.0:     # the same of 2x (a GEMM pre-scaled by 1/2, the bias halved with it)
                    for k in range(s_n):
                        v = row[k]
                        row[k] = _silu_poly(v + v)
                else:
                    r = res[n, c]
                    for k in range(s_n):
                        row[k] = row[k] + r[k]


@numba.njit(inline="always", error_model="numpy", **_NJIT)
def _silu_poly(v):
    """v * sigmoid(v) with polyexp's exp (native/cpu/polyexp.py), sigmoid in the form without cancellation: e / (1 + e)
    below 0 and 1 / (1 + e) from 0 up, e = exp(-|v|) (0 below EXP_LO). Branch-free selects, so loops vectorise; the
    floats of activations.silu_polyexp_inplace's numpy passes."""
    nv = -v if v >= _F32_ZERO else v
    e = _exp(nv)
    e = e if nv >= _LO else _F32_ZERO
    num = _F32_ONE if v >= _F32_ZERO else e
    return v * (num / (e + _F32_ONE))


@numba.njit(error_model="numpy", **_NJIT)
def silu_polyexp_inplace(x, double):
    # _silu_poly of x (of x + x with double: a GEMM pre-scaled by 1/2) in place
    for k in range(x.shape[0]):
        v = x[k]
        if double:
            v = v + v
        x[k] = _silu_poly(v)
