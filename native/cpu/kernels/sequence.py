"""CPU kernels: the Sequence layer (ONNX sequences as Python lists, optionals as value-or-None)."""
import numpy as np

from native.errors import ExecutionError
from native.tactics import simple_tactic


def _pos(p, n, insert=False):
    p = int(np.asarray(p).reshape(-1)[0])
    q = p + n if p < 0 else p
    if not 0 <= q <= (n if insert else n - 1):
        raise ExecutionError(f"sequence position {p} is out of range for a sequence of length {n}")
    return q


def _split_to(x, split, axis, keepdims):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    d = x.shape[axis]
    if split is None:
        parts = np.split(x, d, axis=axis)
        return [np.squeeze(p, axis) for p in parts] if not keepdims else parts
    split = np.asarray(split)
    if split.ndim == 0:
        step = int(split)
        return [np.take(x, np.arange(s, min(s + step, d)), axis=axis) for s in range(0, d, step)]
    return np.split(x, np.cumsum(split.astype(np.int64))[:-1], axis=axis)


def _map(op, inputs):
    body = op.subgraphs["body"]
    n = len(inputs[0])
    results = None
    for i in range(n):
        outs = body([v[i] if isinstance(v, list) else v for v in inputs])
        if results is None:
            results = [[] for _ in outs]
        for k, v in enumerate(outs):
            results[k].append(v)
    return results if results is not None else [[]]


@simple_tactic("Sequence")
def sequence(op, inputs):
    kind = op.params.get("op", "CONSTRUCT")
    x = inputs[0] if inputs else None
    arg = inputs[1] if len(inputs) > 1 else None
    if kind == "CONSTRUCT":
        return [list(inputs)]
    if kind == "EMPTY":
        return [[]]
    if kind == "AT":
        return [x[_pos(arg, len(x))]]
    if kind == "INSERT":
        out = list(x)
        where = len(out) if len(inputs) < 3 or inputs[2] is None else _pos(inputs[2], len(out), insert=True)
        out.insert(where, arg)
        return [out]
    if kind == "ERASE":
        out = list(x)
        del out[len(out) - 1 if arg is None else _pos(arg, len(out))]
        return [out]
    if kind == "LENGTH":
        return [np.array(len(x), np.int64)]
    if kind == "SPLIT_TO":
        return [list(_split_to(x, arg, op.params.get("axis", 0), op.params.get("keepdims", 1)))]
    if kind == "CONCAT_FROM":
        axis = op.params.get("axis", 0)
        if op.params.get("new_axis", 0):
            return [np.stack(x, axis=axis)]
        return [np.concatenate(x, axis=axis)]
    if kind == "MAP":
        return _map(op, inputs)
    if kind == "OPTIONAL":
        return [x]
    if kind == "HAS_ELEMENT":
        return [np.array(x is not None)]
    if kind == "GET_ELEMENT":
        if x is None:
            raise ExecutionError(f"OptionalGetElement '{op.name}': the optional is empty")
        return [x]
    raise ExecutionError(f"Sequence '{op.name}': unknown op {kind}")
