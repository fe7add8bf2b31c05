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


def _cast(x, to, saturate=True):
    dtype = np.dtype(to) if to != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
    if isinstance(x, np.ndarray) and x.dtype.kind in "OUS" and dtype.kind in "fiub":
        return np.asarray(x.astype(np.float64) if dtype.kind == "f" else x.astype(np.float64).astype(dtype)).astype(dtype)
    if dtype.kind in "OUS":
        x = np.asarray(x)
        if x.dtype.kind == "f":
            return np.array([np.format_float_positional(v, unique=True, trim="-") if np.isfinite(v) else str(v).upper().replace("NAN", "NaN").replace("INF", "INF")
                             for v in x.ravel()], dtype=object).reshape(x.shape)
        return x.astype(str).astype(object)
    return np.asarray(x).astype(dtype)


@simple_tactic("Cast")
def cast(op, inputs):
    return [_cast(inputs[0], op.params["to"], op.params.get("saturate", True))]


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
