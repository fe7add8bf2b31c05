"""CPU kernels: constants, identity, cast, shape, assertion."""
import numpy as np

from native.errors import ExecutionError
from native.tactics import simple_tactic


@simple_tactic("Constant")
def constant(op, inputs):
    return [op.weights["value"]]


@simple_tactic("Identity")
def identity(op, inputs):
    return [inputs[0]]


def _np_dtype(name):
    """numpy dtype for a numpy or ml_dtypes name (bfloat16, float8_*, int4, float4_e2m1fn ...)."""
    if isinstance(name, np.dtype):
        return name
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


def _to_small_float(x, dtype, saturate, round_mode):
    """Float8 / float4 / e8m0 casts with ONNX's saturation rule: out-of-range (and inf) values clamp to ±max."""
    import ml_dtypes
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    if dtype.name == "float8_e8m0fnu":
        xf = x.astype(np.float64)
        m, e = np.frexp(xf)  # xf = m * 2**e, 0.5 <= |m| < 1
        if round_mode == "up":
            p = np.where(m == 0.5, e - 1, e)
        elif round_mode == "down":
            p = e - 1
        else:  # nearest: the closer of 2**(e-1) and 2**e (ties up)
            p = np.where(m >= 0.75, e, e - 1)
        y = np.where(xf == 0, 0.0, np.ldexp(1.0, p.astype(np.int32)))
        if saturate:
            y = np.clip(np.where(np.isinf(xf), np.inf, y), 2.0 ** -127, 2.0 ** 127)
        y = np.where(np.isnan(xf), np.nan, y)
        return y.astype(dtype)
    if saturate and dtype.kind == "V" or saturate and "float" in dtype.name:
        hi = float(ml_dtypes.finfo(dtype).max)
        with np.errstate(over="ignore"):
            x = np.clip(x.astype(np.float32) if x.itemsize < 4 else x, -hi, hi)  # NaN stays NaN; ±inf clamps
    return x.astype(dtype)


def _cast(x, to, saturate=True, round_mode="up"):
    dtype = _np_dtype(to)
    if isinstance(x, np.ndarray) and x.dtype.kind in "OUS" and dtype.kind not in "OUS":
        return np.asarray(x.astype(np.float64) if dtype.kind == "f" else x.astype(np.float64).astype(dtype)).astype(dtype)
    if dtype.kind in "OUS":
        x = np.asarray(x)
        if x.dtype.kind == "f":
            return np.array([np.format_float_positional(v, unique=True, trim="-") if np.isfinite(v) else str(v).upper().replace("NAN", "NaN").replace("INF", "INF")
                             for v in x.ravel()], dtype=object).reshape(x.shape)
        return x.astype(str).astype(object)
    if dtype.name.startswith(("float8", "float4", "float6")):
        return _to_small_float(x, dtype, saturate, round_mode)
    return np.asarray(x).astype(dtype)


_PLAIN_TARGETS = {}   # `to` -> its numpy dtype when a cast to it is a plain astype (numbers, bool), else None


def _plain_target(to):
    d = _PLAIN_TARGETS.get(to, False)
    if d is False:
        try:
            d = np.dtype(to) if isinstance(to, (str, np.dtype)) else None
        except TypeError:
            d = None
        if d is not None and (d.kind not in "biufc" or d.name.startswith(("float8", "float4", "float6"))):
            d = None
        _PLAIN_TARGETS[to] = d
    return d


@simple_tactic("Cast")
def cast(op, inputs):
    """Cast to params['to']; with `to` None (CastLike whose target dtype was unknown at import) to input 1's dtype."""
    to = op.params.get("to")
    x = inputs[0]
    if to is not None and type(x) is np.ndarray and x.dtype.kind in "biufc":
        d = _plain_target(to)
        if d is not None:   # _cast's last line, without its per-call dtype lookups
            return [x.astype(d)]
    if to is None:
        to = np.asarray(inputs[1]).dtype
    return [_cast(inputs[0], to, op.params.get("saturate", True), op.params.get("round_mode", "up"))]


@simple_tactic("Shape")
def shape(op, inputs):
    s = np.array(np.shape(inputs[0]), dtype=np.int64)
    start, end = op.params.get("start", 0) or 0, op.params.get("end")
    return [s[start:end] if end is not None else s[start:]]


@simple_tactic("Assertion")
def assertion(op, inputs):
    if not np.all(inputs[0]):
        raise ExecutionError(f"assertion '{op.name}' failed: {op.params.get('message', '')}")
    return []
