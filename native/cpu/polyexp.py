"""Row kernels with a polynomial exp: bias + GELU, softmax and LayerNorm over float32 rows, as one formula with two
implementations that give the same floats: numpy passes here, and compiled loops (native/cpu/jit.py) where numba
is installed; native/cpu/kernels/rows.py runs whichever is there.

Why a formula of our own: numpy's float32 exp / tanh cost 2-4 ns an element on the 2-core CI machine, so a GELU
over a [197, 768] GEMM output took longer than the GEMM. This exp is Cody-Waite range reduction (x = k ln2 + r,
|r| <= ln2/2), a degree-6 Taylor polynomial for e^r and 2^k put straight into the exponent bits: relative error
< 3e-7 (about 2 ulp), arguments clamped to [EXP_LO, EXP_HI] (below EXP_LO the callers use 0). Every step is one
IEEE float32 operation (no fused multiply-add, nothing reassociated), so numpy and the compiled loop round alike;
sums run in 8 lanes (element j into lane j % 8, each lane in order, the lanes then added pairwise:
((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), the tail of a row not a multiple of 8 added after, in order), an order both can
follow. The floats differ from numpy's exp (so these are tactics of their own: the MatrixMultiply "packed-gemm-polyexp",
the Attention "polyexp-softmax", the Normalization "lane-stats"), never a silent change of an existing tactic.

    gelu_rows(y [M, N], bias [N] | None, kind[, c0, c1])   y = act(y + bias) in place (columns c0:c1);
                                                     kind GELU_ERF | GELU_TANH
    softmax_rows(s [M, N])                           softmax over each row, in place; a row whose max is -inf
                                                     (every entry masked) becomes NaN, as numpy's exp(x - max) does
    layernorm_rows(x [M, N], gamma [N], beta [N], eps, y)   y = (x - mean) / sqrt(var + eps) * gamma + beta; returns
                                                     (y, mean [M], inv [M])
"""
from __future__ import annotations

import math

import numpy as np

F32 = np.float32
EXP_LO, EXP_HI = F32(-87.0), F32(88.0)
LOG2E = F32(1.4426950408889634)
LN2_HI, LN2_LO = F32(0.693359375), F32(-2.12194440e-4)   # ln 2 = LN2_HI + LN2_LO; k * LN2_HI is exact
ROUND = F32(12582912.0)                                    # 1.5 * 2^23: (v + ROUND) - ROUND rounds v to an integer
EXP_C = tuple(F32(1.0 / math.factorial(i)) for i in range(6, 1, -1))   # 1/6! .. 1/2!, Horner order
ONE, ZERO, HALF = F32(1.0), F32(0.0), F32(0.5)
# GELU(erf): x * Phi(x) = relu(x) - |x| * erfc(|x| / sqrt 2) / 2, erfc by Abramowitz & Stegun 7.1.26 (absolute error
# < 1.5e-7) with the coefficients halved: the same form as the numpy GELU_ERF activation, this exp
AS_P = F32(0.3275911 / math.sqrt(2.0))
AS_HALF_A = tuple(F32(0.5 * c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
MINUS_HALF = F32(-0.5)
# GELU(tanh): 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)
TANH_C = F32(0.044715)
MINUS_TWO_SQRT_2_OVER_PI = F32(-2.0 * math.sqrt(2.0 / math.pi))
LANES = 8

ACTIVATIONS = ("GELU_ERF", "GELU_TANH")


def exp(v):
    """e^v for a float32 array (a new array), EXP_LO <= v <= EXP_HI after clamping; NaN stays NaN."""
    v = np.clip(v, EXP_LO, EXP_HI)    # (numpy's clip loop is vectorised, maximum with a scalar is not; NaN kept)
    kf = v * LOG2E
    kf += ROUND
    kf -= ROUND
    r = v - kf * LN2_HI
    r -= kf * LN2_LO
    p = np.full_like(r, EXP_C[0])
    for c in EXP_C[1:]:
        p *= r
        p += c
    p *= r
    p += ONE
    p *= r
    p += ONE
    with np.errstate(invalid="ignore"):
        k = kf.astype(np.int32)
    k += 127
    k <<= 23
    p *= k.view(np.float32)
    return p


def _gelu_erf(x):
    ax = np.abs(x)
    t = ax * AS_P
    t += ONE
    t = np.divide(ONE, t, out=t)
    h = t * AS_HALF_A[4]
    for c in AS_HALF_A[3::-1]:
        h += c
        h *= t
    z = ax * MINUS_HALF
    z *= ax
    h *= exp(z)
    h *= ax
    np.clip(x, ZERO, F32(np.inf), out=x)    # relu as compiled (`x if x > 0 else 0`): the clip keeps -0.0, and
    x += ZERO                               # -0.0 + 0.0 is +0.0; a NaN stays NaN here, and 0 - NaN is NaN there
    x -= h
    return x


def _gelu_tanh(x):
    u = x * x
    u *= TANH_C
    u *= x
    u += x
    u *= MINUS_TWO_SQRT_2_OVER_PI
    e = exp(u)
    e += ONE
    return np.divide(x, e, out=x)


def gelu_rows(y, bias, kind, c0=0, c1=None):
    """y [M, N] float32: y[:, c0:c1] = act(y[:, c0:c1] + bias[c0:c1]) in place (bias [N] float32 or None);
    returns y."""
    part = y[:, c0:c1]
    if bias is not None:
        part += bias[c0:c1]
    with np.errstate(over="ignore", invalid="ignore"):
        _gelu_tanh(part) if kind == "GELU_TANH" else _gelu_erf(part)
    return y


def lane_sum(x):
    """Sum over the last axis of a float32 [M, N] array in the 8-lane order (module doc); returns [M]."""
    m, n = x.shape
    full = n - n % LANES
    if full:   # the lanes as [N / 8, M, 8], reduced over the first axis: numpy adds those rows in order
        lanes = np.add.reduce(np.ascontiguousarray(x[:, :full].reshape(m, full // LANES, LANES).transpose(1, 0, 2)),
                              axis=0)
    else:
        lanes = np.zeros((m, LANES), np.float32)
    s = (lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])
    s += (lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7])
    for j in range(full, n):
        s += x[:, j]
    return s


def softmax_rows(s):
    """s [M, N] float32: softmax over each row, in place; returns s."""
    with np.errstate(invalid="ignore", over="ignore"):
        s -= np.maximum.reduce(s, axis=-1, keepdims=True)
        low = s < EXP_LO
        e = exp(s)
        e[low] = ZERO
        s[...] = e
        s /= lane_sum(s)[:, None]
    return s


def layernorm_rows(x, gamma, beta, eps, y):
    """x [M, N] float32 -> y [M, N] (may be x): (x - mean) * inv * gamma + beta with inv = 1 / sqrt(var + eps),
    mean and var lane sums / N; gamma / beta [N] float32; returns (y, mean [M], inv [M])."""
    n = x.shape[1]
    mean = lane_sum(x)
    mean /= F32(n)
    d = np.subtract(x, mean[:, None], out=y)
    var = lane_sum(d * d)
    var /= F32(n)
    var += F32(eps)
    inv = np.sqrt(var, out=var)
    inv = np.divide(ONE, inv, out=inv)
    d *= inv[:, None]
    d *= gamma
    d += beta
    return d, mean, inv
