"""CPU kernels: pointwise layers (Activation, ElementWise, Unary, Select).

Outputs keep ONNX's dtype rules: arithmetic keeps the input dtype (integer DIV truncates toward zero like C,
integer POW stays integer), comparisons and logic give bool. Each kernel looks its op up in a dict once per call.
"""
import numpy as np

from native.cpu.kernels.activations import ACTIVATIONS, activation, erf
from native.limits import check_size
from native.tactics import simple_tactic


def _arr(y):
    return y if isinstance(y, np.ndarray) else np.asarray(y)


# --- binary -----------------------------------------------------------------------------------------------------
def _div(a, b):
    k = a.dtype.kind
    if k == "f" or (k not in "iu" and (k == "c" or a.dtype.name == "bfloat16")):   # (dtype.name costs µs)
        return np.divide(a, b)
    if a.size == 1 and b.size == 1:   # a length or a size: C's division on Python ints, without np.errstate
        x, y = int(a.reshape(-1)[0]), int(b.reshape(-1)[0])
        if y != 0 and not (k == "i" and y == -1):   # (x / 0 and MIN / -1 keep numpy's answers below)
            q = abs(x) // abs(y)
            return np.array(-q if (x < 0) != (y < 0) else q, a.dtype).reshape(a.shape if a.ndim >= b.ndim
                                                                               else b.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        if k == "u":
            return np.floor_divide(a, b)
        q = np.floor_divide(a, b)
        # floor → trunc: bump the quotient where the signs differ and the division is inexact
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        if fix.any():
            q = q + fix.astype(q.dtype)
        return q


def _pow(a, b):
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.power(a, b.astype(a.dtype) if b.dtype != a.dtype else b)
    if b.dtype.kind in "iu":
        return np.power(a, b.astype(a.dtype) if b.dtype != a.dtype else b)
    return np.power(a.astype(np.float64), b).astype(a.dtype)


def _mod(a, b):
    """ONNX Mod with fmod=0: the result takes the divisor's sign (Python %)."""
    with np.errstate(divide="ignore", invalid="ignore"):   # x % 0 and inf % y are NaN (opset 28 states it)
        return np.mod(a, b)


def _fmod(a, b):
    """ONNX Mod with fmod=1: the result takes the dividend's sign (C fmod)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


def _floor_div(a, b):
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.floor_divide(a, b)
    return np.floor(np.divide(a, b))


def _equal(a, b):
    return np.equal(a, b) if a.dtype.kind not in "OUS" else np.asarray(a == b, dtype=bool)


BINARY = {
    "SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum, "SUB": np.subtract, "DIV": _div,
    "POW": _pow, "FLOOR_DIV": _floor_div, "AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor,
    "EQUAL": _equal, "GREATER": np.greater, "LESS": np.less, "GREATER_EQUAL": np.greater_equal,
    "LESS_EQUAL": np.less_equal, "MOD": _mod, "FMOD": _fmod, "BITSHIFT_LEFT": np.left_shift,
    "BITSHIFT_RIGHT": np.right_shift, "BITWISE_AND": np.bitwise_and, "BITWISE_OR": np.bitwise_or,
    "BITWISE_XOR": np.bitwise_xor,
}
_MIXED_OK = {"POW"}  # ops whose operands may legally differ in dtype
BROADCAST_CHECK_ELEMENTS = 1 << 24  # operands whose size product is below this broadcast to a small output


# ops that write straight into a planned output buffer (the memory plan's arena view): numpy ufuncs with `out=`
_INTO = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum, "SUB": np.subtract,
         "GREATER": np.greater, "LESS": np.less, "GREATER_EQUAL": np.greater_equal, "LESS_EQUAL": np.less_equal,
         "AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}


@simple_tactic("ElementWise", writes_outputs=True)
def elementwise(op, inputs, outputs=None):
    """Broadcasting binary op; a second operand of another dtype (an importer's constant) is cast to the first's."""
    name = op.params["op"]
    fn = BINARY[name]
    a, b = inputs[0], inputs[1]
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if not isinstance(b, np.ndarray):
        b = np.asarray(b)
    if a.dtype != b.dtype and name not in _MIXED_OK and a.dtype.kind not in "OUS":
        b = b.astype(a.dtype)
    if outputs is not None and outputs[0] is not None:
        into = _INTO.get(name) or (np.divide if name == "DIV" and a.dtype.kind == "f" else None)
        if into is not None:
            return [into(a, b, out=outputs[0])]
    if a.size * b.size > BROADCAST_CHECK_ELEMENTS:  # the output is at most a.size * b.size: check only then
        check_size(op, np.broadcast_shapes(a.shape, b.shape), max(a.dtype.itemsize, b.dtype.itemsize))
    return [_arr(fn(a, b))]


# --- unary ------------------------------------------------------------------------------------------------------
def _isinf(x, params):
    pos, neg = params.get("detect_positive", True), params.get("detect_negative", True)
    if pos and neg:
        return np.isinf(x)
    if pos:
        return np.isposinf(x)
    if neg:
        return np.isneginf(x)
    return np.zeros(x.shape, dtype=bool)


def _round(x, params):
    return np.round(x) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x.copy()


def _rsqrt(x, params):
    y = np.sqrt(x)
    return np.reciprocal(y, out=y)


def _det(x, params):
    """Determinant over the last two dims (float16/bfloat16 computed in float32)."""
    if x.dtype.itemsize < 4:
        return np.linalg.det(x.astype(np.float32)).astype(x.dtype)
    return np.linalg.det(x)


def _sign(x, params):
    return np.sign(x)


def _u(fn):
    return lambda x, params: fn(x)


def _quiet(fn):
    def run(x, params):
        with np.errstate(all="ignore"):
            return fn(x)
    return run


UNARY = {
    "EXP": _u(np.exp), "LOG": _quiet(np.log), "SQRT": _quiet(np.sqrt), "RECIP": _quiet(np.reciprocal),
    "ABS": _u(np.abs), "NEG": _u(np.negative), "SIN": _u(np.sin), "COS": _u(np.cos), "TAN": _u(np.tan),
    "SINH": _u(np.sinh), "COSH": _u(np.cosh), "ASIN": _quiet(np.arcsin), "ACOS": _quiet(np.arccos),
    "ATAN": _u(np.arctan), "ASINH": _u(np.arcsinh), "ACOSH": _quiet(np.arccosh), "ATANH": _quiet(np.arctanh),
    "CEIL": _u(np.ceil), "FLOOR": _u(np.floor), "ERF": _u(erf), "NOT": _u(np.logical_not), "SIGN": _sign,
    "ROUND": _round, "ISINF": _isinf, "ISNAN": _u(np.isnan), "BITWISE_NOT": _u(np.invert),
    "RECIPROCAL_SQRT": _quiet(_rsqrt), "DET": _det,
}


# float ops that write straight into a planned output buffer
_UNARY_INTO = {"EXP": np.exp, "ABS": np.abs, "NEG": np.negative, "SQRT": np.sqrt, "RECIP": np.reciprocal,
               "LOG": np.log, "SIN": np.sin, "COS": np.cos, "CEIL": np.ceil, "FLOOR": np.floor, "ERF": erf}


@simple_tactic("Unary", writes_outputs=True)
def unary(op, inputs, outputs=None):
    x = inputs[0]
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if outputs is not None and outputs[0] is not None and x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        into = _UNARY_INTO.get(op.params["op"])
        if into is not None:
            with np.errstate(all="ignore"):
                return [into(x, out=outputs[0])]
    return [_arr(UNARY[op.params["op"]](x, op.params))]


# --- activation and select --------------------------------------------------------------------------------------
@simple_tactic("Activation", writes_outputs=True)
def activation_layer(op, inputs, outputs=None):
    """Activation by `type`; PRELU takes its slope from input 1; CLIP may take its bounds from inputs 1 and 2."""
    p = op.params
    x = inputs[0]
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    kind = p["type"]
    if outputs is not None and outputs[0] is not None and len(inputs) == 1 and x.dtype.kind == "f" and \
            x.dtype.itemsize >= 4 and kind in ACTIVATIONS:   # straight into the planned buffer
        return [ACTIVATIONS[kind](x, p.get("alpha", 0.0), p.get("beta", 0.0), outputs[0])]
    if kind == "PRELU":
        slope = inputs[1]
        return [np.where(x < 0, x * slope.astype(x.dtype, copy=False), x)]
    if kind == "CLIP" and len(inputs) > 1:
        lo = inputs[1] if inputs[1] is not None else p.get("alpha")
        hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else p.get("beta")
        lo = _bound(lo, x.dtype, True)
        hi = _bound(hi, x.dtype, False)
        return [np.clip(x, lo, hi)]  # == min(max(x, lo), hi), also when lo > hi
    return [_arr(activation(x, kind, p.get("alpha", 0.0), p.get("beta", 0.0)))]


def _bound(v, dtype, low):
    if v is None:
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return dtype.type(info.min if low else info.max)
        return dtype.type(-np.inf if low else np.inf)
    return np.asarray(v).astype(dtype, copy=False)


@simple_tactic("Select")
def select(op, inputs):
    return [_arr(np.where(inputs[0], inputs[1], inputs[2]))]
