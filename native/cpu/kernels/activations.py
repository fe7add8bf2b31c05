"""Activation math shared by the Activation layer and fused epilogues.

`activation_inplace(y, type, alpha, beta)` overwrites `y` where it is a writable float array (fused epilogues own
their buffer) and otherwise returns a fresh array; `activation(x, ...)` never touches `x` (the layer's kernel).
alpha/beta follow TensorRT's meaning per type (e.g. CLIP: [alpha, beta]; HARD_SIGMOID: max(0, min(1, alpha*x+beta));
SOFTPLUS: alpha*log(1+exp(beta*x)); SCALED_TANH: alpha*tanh(beta*x); SELU: beta*(x>0 ? x : alpha*(exp(x)-1));
SHRINK: lambda=alpha, bias=beta; SWISH: x*sigmoid(alpha*x)).
Every function below takes (x, alpha, beta, out) and writes its first result into `out` (x itself, or None for a new
array); later steps work in place on that first result, so the whole activation makes at most one new array.
"""
import math

import numpy as np

from native.cpu import jit, polyexp

_SCIPY_ERF = []   # [erf or None] once looked up


def _scipy_erf_fn():
    """scipy's erf (a fast vectorised C loop), imported on first use: importing scipy.special costs ~0.25 s,
    which every CLI command would pay at start-up; None without scipy (a numpy series/asymptotic form is used)."""
    if not _SCIPY_ERF:
        try:
            from scipy.special import erf
        except Exception:  # pragma: no cover
            erf = None
        _SCIPY_ERF.append(erf)
    return _SCIPY_ERF[0]


_math_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x, out=None):
    """Error function, elementwise (float dtypes keep their dtype)."""
    _scipy_erf = _scipy_erf_fn()
    if _scipy_erf is not None:
        if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
            return _scipy_erf(x, out=out) if out is not None else _scipy_erf(x)
        y = _scipy_erf(x.astype(np.float32))  # float16 / bfloat16: compute in float32, keep the dtype
        if out is not None:
            out[...] = y
            return out
        return y.astype(x.dtype)
    if np.asarray(x).dtype == np.float64:  # float64 callers (the fp64 oracle) need erf to the last bit
        y = _math_erf(np.asarray(x)).astype(np.float64)
        if out is not None:
            out[...] = y
            return out
        return y
    # Abramowitz-Stegun 7.1.26 refined by one Newton step on float64 (|error| < 1e-9)
    x64 = np.asarray(x, dtype=np.float64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * np.exp(-a * a)
    small = a < 2.0  # Taylor series where it converges fast, which also fixes tiny-|x| relative error
    if small.any():
        xs = a[small]
        term, acc = xs.copy(), xs.copy()
        x2 = xs * xs
        for n in range(1, 40):
            term = term * (-x2) / n
            acc += term / (2 * n + 1)
        y[small] = acc * (2.0 / math.sqrt(math.pi))
    y = np.copysign(y, x64)
    if out is not None:
        out[...] = y
        return out
    return y.astype(x.dtype) if x.dtype.kind == "f" else y


# erfc(z) ~ t*exp(-z*z + P(t)), t = 1/(1+z/2), z >= 0: fractional error < 1.2e-7 (Numerical Recipes' Chebyshev fit)
_ERFC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
           -0.82215223, 0.17087277)


def erf_fast(x):
    """erf with absolute error < 2.5e-7 in ~15 SIMD numpy passes (scipy's erf is a scalar loop, ~25x slower);
    good for GELU, where only absolute error matters. Returns a new array of x's dtype."""
    z = np.abs(x)
    t = np.multiply(z, 0.5)
    t += 1
    np.reciprocal(t, out=t)
    p = np.full_like(t, _ERFC_P[-1])
    for c in _ERFC_P[-2::-1]:
        p *= t
        p += c
    z *= z
    p -= z
    np.exp(p, out=p)
    p *= t  # erfc(|x|)
    np.subtract(1, p, out=p)
    return np.copysign(p, x, out=p)


# numpy's clip ufunc itself: np.clip's Python wrapper (argument checks, dispatch) costs several µs per call, as much
# as the whole ReLU of a small layer; the ufunc gives the same values (np.clip ends in it)
_CLIP_UFUNC = getattr(getattr(getattr(np, "_core", None), "umath", None), "clip", None)
if not isinstance(_CLIP_UFUNC, np.ufunc):
    _CLIP_UFUNC = None


def relu(x, out=None):
    """max(x, 0). For floats as np.clip(x, 0, inf): numpy's clip loop is vectorised where maximum-with-a-scalar
    is not (3-4x faster on AVX-512 machines, same values; NaN stays NaN)."""
    if x.dtype.kind == "f":
        t = x.dtype.type
        if _CLIP_UFUNC is not None and isinstance(x, np.ndarray):
            return _CLIP_UFUNC(x, t(0), t(np.inf), out=out)
        return np.clip(x, 0, t(np.inf), out=out)
    return np.maximum(x, 0, out=out)


def _clip_fast(x, lo, hi, out):
    """np.clip(x, lo, hi, out=out) for a float array and two float bounds: the clip ufunc np.clip ends in, without
    its wrapper (the same values; several µs a call, which squeeze-excite's hard sigmoids pay per layer)."""
    if _CLIP_UFUNC is not None and isinstance(x, np.ndarray) and x.dtype.kind == "f":
        t = x.dtype.type
        return _CLIP_UFUNC(x, t(lo), t(hi), out=out)
    return np.clip(x, lo, hi, out=out)


_ONE_PASS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _one_pass(name, x, out, *args):
    """The activation `name` as one compiled pass over a contiguous float32/float64 array (native/cpu/jit.py: the
    numpy passes' floats, bit for bit, without their temporaries and per-call costs: 3-4x faster on a mobilenet
    epilogue), or None where numba is absent or the arrays do not fit (then the numpy passes run)."""
    if type(x) is not np.ndarray or x.dtype not in _ONE_PASS_DTYPES or not x.flags.c_contiguous:
        return None
    if out is x:
        if not x.flags.writeable:
            return None
        fn = jit.kernel(name + "_inplace")
        if fn is None:
            return None
        fn(x.reshape(-1), *args)
        return x
    if out is not None and (type(out) is not np.ndarray or out.dtype != x.dtype or out.shape != x.shape
                            or not out.flags.c_contiguous or not out.flags.writeable
                            or np.may_share_memory(x, out)):
        return None
    fn = jit.kernel(name)
    if fn is None:
        return None
    y = np.empty_like(x) if out is None else out
    fn(x.reshape(-1), y.reshape(-1), *args)
    return y


def _relu(x, a, b, out):
    return relu(x, out)


def _sigmoid(x, a, b, out):
    # e/(1+e) below 0 and 1/(1+e) from 0 up, e = exp(-|x|) in (0, 1]: no overflow, and small values keep float32's
    # relative precision. (0.5*tanh(x/2)+0.5, one transcendental fewer, cancels to an absolute error of ~3e-8: 4% of
    # a probability of 1e-6, the tail of a detector's probability map; docs/PRECISION.md.)
    pos = np.greater_equal(x, 0).view(np.uint8)   # before `out` (which may be x) is written
    e = np.abs(x)
    np.negative(e, out=e)
    np.exp(e, out=e)
    num = np.maximum(e, pos, dtype=e.dtype)       # 1 from 0 up, else e
    y = np.add(e, 1.0, out=out)
    return np.divide(num, y, out=y)


def _tanh(x, a, b, out):
    return np.tanh(x, out=out)


def _leaky_relu(x, a, b, out):
    """x where x >= 0, else x * alpha. For 0 < alpha < 1 (a Python number, so the product is in x's type) that is
    max(x, x * alpha): two vectorised passes instead of a masked multiply (numpy's `where=` loop is scalar: ~9 ns
    an element, 20x slower on a 57K-element map), and the same floats: the product is the masked form's product,
    x >= 0 keeps x (-0.0, +inf and NaN included), and x < 0 gets the product (which lies between x and 0)."""
    if type(a) in (float, int) and 0.0 < a < 1.0 and x.dtype.kind == "f":
        t = np.multiply(x, a)
        return np.maximum(x, t, out=t if out is None else out)
    y = x.copy() if out is None else out
    np.multiply(y, a, out=y, where=y < 0)
    return y


def _elu(x, a, b, out):
    neg = x < 0
    e = np.expm1(np.minimum(x, 0))
    e *= a
    if out is None:
        return np.where(neg, e, x)
    np.copyto(out, e, where=neg)
    return out


def _selu(x, a, b, out):
    y = _elu(x, a, 0.0, out)
    y *= b
    return y


def _softsign(x, a, b, out):
    d = np.abs(x)
    d += 1
    return np.divide(x, d, out=out)


def _softplus(x, a, b, out):
    if b != 1.0:
        y = np.multiply(x, b, out=out)
        np.logaddexp(y, 0, out=y)
    else:
        y = np.logaddexp(x, 0, out=out)
    if a != 1.0:
        y *= a
    return y


def _clip(x, a, b, out):
    if a is None and b is None:
        return x.copy() if out is None else out
    if x.dtype.kind == "f":  # both bounds given: the vectorised clip loop (see `relu`)
        a = -np.inf if a is None else a
        b = np.inf if b is None else b
        if type(a) in (int, float) and type(b) in (int, float) and all(
                v in (-math.inf, math.inf) or abs(v) < 3e38 for v in (a, b)):   # float32 holds them exactly or as inf
            return _clip_fast(x, a, b, out)
    return np.clip(x, a, b, out=out)


def _hard_sigmoid(x, a, b, out):
    if type(a) in (float, int) and type(b) in (float, int):
        y = _one_pass("hard_sigmoid", x, out, float(a), float(b))
        if y is not None:
            return y
    y = np.multiply(x, a, out=out)
    y += b
    return _clip_fast(y, 0, 1, y)


def _scaled_tanh(x, a, b, out):
    y = np.multiply(x, b, out=out)
    np.tanh(y, out=y)
    y *= a
    return y


def _thresholded_relu(x, a, b, out):
    if out is None:
        return np.where(x > a, x, np.zeros((), x.dtype))
    out[x <= a] = 0
    return out


# erfc(z) ~ (a1 t + ... + a5 t^5) exp(-z*z), t = 1/(1 + p z), z >= 0: absolute error < 1.5e-7 (Abramowitz &
# Stegun 7.1.26); the coefficients below are a_i / 2, so the polynomial gives erfc / 2 directly
_AS_P = 0.3275911 / math.sqrt(2.0)
_AS_HALF_A = tuple(0.5 * c for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def _gelu_erf(x, a, b, out):
    """x * Phi(x) = relu(x) - |x| * erfc(|x| / sqrt 2) / 2: one branch-free form for both signs, ~20 in-place
    numpy passes over two scratch buffers (absolute error < 1e-6 up to |x| ~ 10, where the term vanishes)."""
    ax = np.abs(x)
    t = np.multiply(ax, _AS_P)
    t += 1
    np.reciprocal(t, out=t)
    h = np.multiply(t, _AS_HALF_A[4])
    for c in _AS_HALF_A[3::-1]:
        h += c
        h *= t
    np.multiply(ax, -0.5, out=t)
    t *= ax
    np.exp(t, out=t)
    h *= t
    h *= ax
    y = relu(x, out)
    y -= h
    return y


def _gelu_tanh(x, a, b, out):
    t = np.multiply(x, x)
    t *= 0.044715
    t += 1
    t *= x
    t *= math.sqrt(2.0 / math.pi)
    np.tanh(t, out=t)
    t += 1
    t *= 0.5
    return np.multiply(x, t, out=out)


def _silu(x, a, b, out):
    # x * sigmoid(x) == h + h * tanh(h) with h = x / 2: four passes and one transcendental
    h = np.multiply(x, 0.5)
    y = np.tanh(h, out=out)
    y *= h
    y += h
    return y


def silu_polyexp_inplace(y, double=False):
    """SiLU of y (of y + y with double: a GEMM's halved output) in place on a float32 array, by polyexp's exp
    (native/cpu/polyexp.py): v * sigmoid(v), sigmoid = e / (1 + e) below 0 and 1 / (1 + e) from 0 up, e = exp(-|v|)
    (0 below EXP_LO). One compiled pass where numba is installed (jit_act.silu_polyexp_inplace), else these numpy
    passes; the two give the same floats (tested). Not numpy's tanh: the *-polyexp convolution tactics' own floats
    (native/cpu/kernels/conv/silu_polyexp.py), ~3x faster than _silu's four passes."""
    fn = jit.kernel("silu_polyexp_inplace") if y.flags.c_contiguous else None
    if fn is not None:
        fn(y.reshape(-1), bool(double))
        return y
    v = y + y if double else y
    nv = np.abs(v)
    np.negative(nv, out=nv)
    with np.errstate(over="ignore", invalid="ignore"):
        e = polyexp.exp(nv)
        np.copyto(e, polyexp.ZERO, where=nv < polyexp.EXP_LO)
        num = np.where(v >= 0, polyexp.ONE, e)
        e += polyexp.ONE
        num /= e
        np.multiply(v, num, out=y)
    return y


def _silu_polyexp(x, a, b, out):
    # the *-polyexp convolution tactics' SiLU (float32; other types: numpy's SILU)
    if x.dtype != np.float32:
        return _silu(x, a, b, out)
    y = x.copy() if out is None else out
    if y is not x:
        np.copyto(y, x)
    return silu_polyexp_inplace(y)


def _swish(x, a, b, out):
    s = np.multiply(x, a)
    return np.multiply(x, _sigmoid(s, 0, 0, s), out=out)


def _hard_swish(x, a, b, out):
    y = _one_pass("hard_swish", x, out)
    if y is not None:
        return y
    t = np.multiply(x, 1.0 / 6.0)
    t += 0.5
    _clip_fast(t, 0, 1, t)
    return np.multiply(x, t, out=out)


def _hard_swish_relu6(x, a, b, out):
    """x * relu6(x + 3) / 6 as a hand-written hard-swish computes it (x + 3, clip to [0, 6], times x, divided by 6,
    each step rounded): the floats of that Pointwise chain, which the builder folds into a convolution as this
    post-op on the CPU (passes/fusion_epilogue.py). Not HARD_SWISH (x * clip(x / 6 + 1/2, 0, 1): other roundings)."""
    y = _one_pass("hard_swish_relu6", x, out)
    if y is not None:
        return y
    t = x.dtype.type if x.dtype.kind == "f" else np.float32
    s = np.add(x, t(3))
    _clip_fast(s, 0.0, 6.0, s)
    np.multiply(x, s, out=s)
    return np.divide(s, t(6), out=out)


def _mish(x, a, b, out):
    t = np.logaddexp(x, 0)
    np.tanh(t, out=t)
    return np.multiply(x, t, out=out)


def _celu(x, a, b, out):
    neg = np.minimum(x, 0)
    neg /= a
    np.expm1(neg, out=neg)
    neg *= a
    y = relu(x, out)
    y += neg
    return y


def _shrink(x, a, b, out):
    lo, hi = x < -a, x > a
    y = np.zeros_like(x) if out is None else out
    np.add(x, b, out=y, where=lo)
    np.subtract(x, b, out=y, where=hi)
    if out is not None:
        y[~(lo | hi)] = 0
    return y


ACTIVATIONS = {
    "RELU": _relu, "SIGMOID": _sigmoid, "TANH": _tanh, "LEAKY_RELU": _leaky_relu, "ELU": _elu, "SELU": _selu,
    "SOFTSIGN": _softsign, "SOFTPLUS": _softplus, "CLIP": _clip, "HARD_SIGMOID": _hard_sigmoid,
    "SCALED_TANH": _scaled_tanh, "THRESHOLDED_RELU": _thresholded_relu, "GELU_ERF": _gelu_erf,
    "GELU_TANH": _gelu_tanh, "SILU": _silu, "SWISH": _swish, "HARD_SWISH": _hard_swish, "MISH": _mish,
    "HARD_SWISH_RELU6": _hard_swish_relu6, "SILU_POLYEXP": _silu_polyexp,
    "CELU": _celu, "SHRINK": _shrink,
}


_EXACT = {"RELU", "CLIP", "LEAKY_RELU", "THRESHOLDED_RELU"}  # no rounding beyond one op: fine in half precision


def activation(x, type, alpha=0.0, beta=0.0):
    """f(x) as a new array; `x` is left untouched."""
    fn = ACTIVATIONS.get(type)
    if fn is None:
        raise NotImplementedError(f"activation type {type!r}")
    if type == "CLIP" and x.dtype.kind in "iu":
        alpha, beta = _int_bounds(x.dtype, alpha, beta)
    if x.dtype.itemsize < 4 and x.dtype.kind in "fV" and type not in _EXACT:
        return fn(x.astype(np.float32), alpha, beta, None).astype(x.dtype)  # half types: math in float32
    return fn(x, alpha, beta, None)


def activation_inplace(y, type, alpha=0.0, beta=0.0):
    """f(y), written into `y` where it is a writable array that can hold the result, else a new array."""
    fn = ACTIVATIONS.get(type)
    if fn is None:
        raise NotImplementedError(f"activation type {type!r}")
    if not isinstance(y, np.ndarray) or not y.flags.writeable or (y.dtype.kind != "f" and type not in ("RELU", "CLIP")):
        return activation(np.asarray(y), type, alpha, beta)
    if type == "CLIP" and y.dtype.kind in "iu":
        alpha, beta = _int_bounds(y.dtype, alpha, beta)
    if y.dtype.itemsize < 4 and type not in _EXACT:
        y[...] = fn(y.astype(np.float32), alpha, beta, None)
        return y
    return fn(y, alpha, beta, y)


def activation_into(y, step):
    """A post-op activation step ({"type", "alpha", "beta"}) applied to `y` and left in `y` (copied back where
    activation_inplace had to make a new array): the epilogues' in-place activation."""
    r = activation_inplace(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
    if r is not y:
        np.copyto(y, r)


def _int_bounds(dtype, lo, hi):
    info = np.iinfo(dtype)
    lo = info.min if lo is None or lo == -math.inf else int(max(math.ceil(lo), info.min))
    hi = info.max if hi is None or hi == math.inf else int(min(math.floor(hi), info.max))
    return dtype.type(lo), dtype.type(hi)
