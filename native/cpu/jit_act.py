"""The HardSwish / HardSigmoid kernels compiled with numba (the `jit` extra), reached through
`native.cpu.jit.kernel(name)`: hard_swish, hard_swish_inplace, hard_sigmoid, hard_sigmoid_inplace,
bias_hard_act_inplace (signatures in jit.py's doc). Module-level functions sharing one module-level clip, so numba's
on-disk cache finds them again in the next process (a closure over a compiled helper is keyed by that helper, which
differs per process: such kernels recompiled every time). Imported only where numba is installed.
"""
from __future__ import annotations

import numba

_NJIT = dict(nogil=True, cache=True)


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
