"""A plain forward LSTM's time loop as one compiled call (the `jit` extra), reached through
`native.cpu.jit.kernel("lstm_steps")`: the lstm-direct tactic (native/cpu/kernels/rnn.py).

    lstm_steps(xw [T, B, 4H], rt [H, 4H], b_r [4H], h [B, H], c [B, H], ys [T, B, H], g [4H])
        per step and batch row: g = (xw[t, b] + sum_p h[b, p] * rt[p]) + b_r (the recurrence as a running float32
        sum over p in order from zero, vectorised along 4H), then ONNX's gates (i, o, f, c order): i, o, f =
        sigmoid, c~ = tanh, c = f * c + i * c~, h = o * tanh(c), written to ys[t, b]; h and c are updated in place.
        g is scratch.

sigmoid and tanh are native/cpu/polyexp.py's exp (< 4e-7 relative) in forms without cancellation: sigmoid(v) =
e / (1 + e) below 0 and 1 / (1 + e) from 0 up with e = exp(-|v|); tanh(v) = sign(v) * -m / (2 + m) with m =
expm1(-2|v|), expm1 by the exp's own polynomial without its leading 1 where 2|v| < ln 2 / 2 (so small values keep
their relative precision), else (1 - e) / (1 + e) with e = exp(-2|v|). Their floats are not numpy's tanh, so the
tactic is one of its own. Module level, so numba's disk cache finds it again (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu import polyexp as px
from native.cpu.jit_rows import _LO, _NJIT, _exp

_ONE, _ZERO, _TWO = np.float32(1.0), np.float32(0.0), np.float32(2.0)
_C6, _C5, _C4, _C3, _C2 = px.EXP_C
_HALF_LN2 = np.float32(0.34657359)


@numba.njit(inline="always", **_NJIT)
def sigmoid(v):
    if v != v:
        return v
    nv = -v if v >= _ZERO else v
    e = _exp(nv) if nv >= _LO else _ZERO
    return (_ONE if v >= _ZERO else e) / (e + _ONE)


@numba.njit(inline="always", **_NJIT)
def tanh(v):
    if v != v:
        return v
    a = v if v >= _ZERO else -v
    r = -_TWO * a
    if a * _TWO < _HALF_LN2:        # expm1(r), |r| < ln 2 / 2: the exp's polynomial less its leading 1
        q = _C6 * r + _C5
        q = q * r + _C4
        q = q * r + _C3
        q = q * r + _C2
        m = (q * r + _ONE) * r
        t = -m / (_TWO + m)
    else:
        e = _exp(r) if r >= _LO else _ZERO
        t = (_ONE - e) / (_ONE + e)
    return t if v >= _ZERO else -t


@numba.njit(**_NJIT)
def lstm_steps(xw, rt, b_r, h, c, ys, g):
    steps, batch, gates = xw.shape
    hidden = gates // 4
    k = rt.shape[0]
    k4 = k - k % 4
    for t in range(steps):
        for b in range(batch):
            hb = h[b]
            for j in range(gates):
                g[j] = _ZERO
            for p in range(0, k4, 4):
                h0, h1, h2, h3 = hb[p], hb[p + 1], hb[p + 2], hb[p + 3]
                r0, r1, r2, r3 = rt[p], rt[p + 1], rt[p + 2], rt[p + 3]
                for j in range(gates):
                    g[j] = (((g[j] + h0 * r0[j]) + h1 * r1[j]) + h2 * r2[j]) + h3 * r3[j]
            for p in range(k4, k):
                hp = hb[p]
                rp = rt[p]
                for j in range(gates):
                    g[j] = g[j] + hp * rp[j]
            xt = xw[t, b]
            for j in range(gates):
                g[j] = (xt[j] + g[j]) + b_r[j]
            cb = c[b]
            yt = ys[t, b]
            for j in range(hidden):
                i = sigmoid(g[j])
                o = sigmoid(g[hidden + j])
                f = sigmoid(g[2 * hidden + j])
                cc = tanh(g[3 * hidden + j])
                cn = f * cb[j] + i * cc
                cb[j] = cn
                hn = o * tanh(cn)
                hb[j] = hn
                yt[j] = hn
