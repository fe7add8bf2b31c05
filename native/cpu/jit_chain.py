"""The compiled Pointwise chain (the `jit` extra), reached through `native.cpu.jit.kernel("pointwise_chain")`:
native/cpu/kernels/pointwise_chain.py encodes a program into op codes (jit.PW_*) and runs it here.

    pointwise_chain(x0, x1, x2, x3, y, code [steps, 3], fval [steps, 4], buf [steps, B])
        a fused Pointwise program over full-size inputs and scalars, one block of B elements at a time through
        every step: each step's vectorised loop over the block rounds as numpy's pass over the whole tensor does
        (ops 1-17), so the chain's floats are the interpreter's; ops 18 / 19 (sigmoid / tanh by polyexp's exp,
        native/cpu/jit_rnn.py) are the polyexp-chain tactic's own.

    relu6_swish(x, y, a, lo, hi, d, divide) / relu6_swish_affine(x, y, a, lo, hi, d, divide, op1, v1, op2, v2)
        the hand-written hard-swish chain `x + a, clip to [lo, hi], times x, / d` (or `* d`) in one loop, and the
        same followed by one or two scalar steps (op 3 times v, op 1 plus v, 0 none): the chain's floats.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_rnn import sigmoid, tanh


# one loop per operation (a loop whose operation is chosen per element is not vectorised: 10x slower)
@numba.njit(nogil=True, cache=True, error_model="numpy")   # x / 0 is inf or NaN, as numpy
def binary(op, a, b, out, m):
    if op == 1:
        for k in range(m):
            out[k] = a[k] + b[k]
    elif op == 2:
        for k in range(m):
            out[k] = a[k] - b[k]
    elif op == 3:
        for k in range(m):
            out[k] = a[k] * b[k]
    elif op == 4:
        for k in range(m):
            out[k] = a[k] / b[k]
    elif op == 5:   # numpy's maximum / minimum: a NaN first argument wins, then b on ties and NaN b
        for k in range(m):
            u, v = a[k], b[k]
            r = u if u > v else v
            out[k] = u if u != u else r
    else:
        for k in range(m):
            u, v = a[k], b[k]
            r = u if u < v else v
            out[k] = u if u != u else r

@numba.njit(nogil=True, cache=True, error_model="numpy")
def binary_scalar(op, a, c, out, m, c_first):
    if op == 1:
        for k in range(m):
            out[k] = a[k] + c
    elif op == 3:
        for k in range(m):
            out[k] = a[k] * c
    elif op == 2 and not c_first:
        for k in range(m):
            out[k] = a[k] - c
    elif op == 2:
        for k in range(m):
            out[k] = c - a[k]
    elif op == 4 and not c_first:
        for k in range(m):
            out[k] = a[k] / c
    elif op == 4:
        for k in range(m):
            out[k] = c / a[k]
    elif op == 5 and not c_first:
        for k in range(m):
            u = a[k]
            r = u if u > c else c
            out[k] = u if u != u else r
    elif op == 5:
        for k in range(m):
            v = a[k]
            r = c if c > v else v
            out[k] = c if c != c else r
    elif op == 6 and not c_first:
        for k in range(m):
            u = a[k]
            r = u if u < c else c
            out[k] = u if u != u else r
    else:
        for k in range(m):
            v = a[k]
            r = c if c < v else v
            out[k] = c if c != c else r

@numba.njit(nogil=True, cache=True)
def unary(op, a, out, m, pa, pb):
    t = out.dtype.type
    zero, one, sixth, half = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5)
    if op == 10:        # clip(x, lo, hi) as numpy's clip loop (also RELU: [0, inf])
        for k in range(m):
            v = a[k]
            r = v if v > pa else pa
            r = r if r < pb else pb
            out[k] = v if v != v else r
    elif op == 11:      # leaky relu, 0 < alpha < 1: max(x, x * alpha)
        for k in range(m):
            v = a[k]
            p = v * pa
            out[k] = p if p > v else v
    elif op == 12:
        for k in range(m):
            u = a[k] * pa
            u = u + pb
            if u == u:   # clipped to [0, 1] as numpy's clip loop does (NaN stays NaN)
                u = u if u > zero else zero
                u = u if u < one else one
            out[k] = u
    elif op == 13:
        for k in range(m):
            v = a[k]
            u = v * sixth
            u = u + half
            if u == u:   # clipped to [0, 1] as numpy's clip loop does (NaN stays NaN)
                u = u if u > zero else zero
                u = u if u < one else one
            out[k] = v * u
    elif op == 14:
        for k in range(m):
            out[k] = abs(a[k])
    elif op == 15:
        for k in range(m):
            out[k] = -a[k]
    elif op == 16:
        for k in range(m):
            out[k] = np.sqrt(a[k])
    elif op == 17:      # x ** 2 as numpy's power loop computes a scalar exponent of 2 (x * x)
        for k in range(m):
            v = a[k]
            out[k] = v * v
    elif op == 18:      # polyexp's sigmoid (float32: the polyexp-chain tactic)
        for k in range(m):
            out[k] = sigmoid(a[k])
    else:               # 19: polyexp's tanh
        for k in range(m):
            out[k] = tanh(a[k])

@numba.njit(nogil=True, cache=True)
def operand(x0, x1, x2, x3, buf, kind, idx, s0, m):
    if kind == 2:
        return buf[idx, :m]
    if idx == 0:
        return x0[s0:s0 + m]
    if idx == 1:
        return x1[s0:s0 + m]
    if idx == 2:
        return x2[s0:s0 + m]
    return x3[s0:s0 + m]

@numba.njit(nogil=True, cache=True)
def pointwise_chain(x0, x1, x2, x3, y, code, fval, buf):
    n = y.shape[0]
    steps, block = buf.shape
    t = y.dtype.type
    for s0 in range(0, n, block):
        m = min(block, n - s0)
        for j in range(steps):
            op, ka, kb = code[j, 0], code[j, 1], code[j, 2]
            out = y[s0:s0 + m] if j == steps - 1 else buf[j, :m]
            ia, ib = int(fval[j, 0]), int(fval[j, 1])
            pa, pb = t(fval[j, 2]), t(fval[j, 3])
            if op >= 10:
                unary(op, operand(x0, x1, x2, x3, buf, ka, ia, s0, m), out, m, pa, pb)
            elif ka == 1:
                binary_scalar(op, operand(x0, x1, x2, x3, buf, kb, ib, s0, m), pa, out, m, True)
            elif kb == 1:
                binary_scalar(op, operand(x0, x1, x2, x3, buf, ka, ia, s0, m), pb, out, m, False)
            else:
                binary(op, operand(x0, x1, x2, x3, buf, ka, ia, s0, m), operand(x0, x1, x2, x3, buf, kb, ib, s0, m),
                       out, m)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _times_clipped(v, a, lo, hi):
    # v * clip(v + a, lo, hi): binary_scalar's add, unary's clip with its NaN rule (NaN stays NaN), binary's product
    t = v + a
    r = t if t > lo else lo
    r = r if r < hi else hi
    t = t if t != t else r
    return v * t


@numba.njit(nogil=True, cache=True, error_model="numpy")
def relu6_swish(x, y, a, lo, hi, d, divide):
    # the hand-written hard-swish chain (x + a, clipped to [lo, hi], times x, then / d or * d) in one vectorised
    # loop: each step rounded as the chain's own loops round it (binary_scalar's add, unary's clip with its NaN rule,
    # binary's product, binary_scalar's divide or multiply), no block buffers, one pass over memory
    if divide:
        for k in range(x.shape[0]):
            y[k] = _times_clipped(x[k], a, lo, hi) / d
    else:
        for k in range(x.shape[0]):
            y[k] = _times_clipped(x[k], a, lo, hi) * d


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _affine(t, op, v):
    # a trailing scalar step of the chain: 3 PROD, 1 SUM (binary_scalar's rounding), 0 none
    if op == 3:
        return t * v
    if op == 1:
        return t + v
    return t


@numba.njit(nogil=True, cache=True, error_model="numpy")
def relu6_swish_affine(x, y, a, lo, hi, d, divide, op1, v1, op2, v2):
    # relu6_swish's loop, then one or two scalar steps (times s, plus t: PP-LCNetV3's learnable affine block after
    # its hard-swish), each rounded as the chain's binary_scalar rounds it: one pass instead of the interpreter's six
    for k in range(x.shape[0]):
        t = _times_clipped(x[k], a, lo, hi)
        t = t / d if divide else t * d
        y[k] = _affine(_affine(t, op1, v1), op2, v2)
