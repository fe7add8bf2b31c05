"""CPU kernels: reductions (Reduce, ArgReduce), Softmax / LogSoftmax / Hardmax, Cumulative.

Outputs keep the input dtype (sums of int32 stay int32, means of float16 stay float16). Empty reductions give
the op's identity: 0 for sums and norms, 1 for products, the dtype's lowest/highest value for MAX/MIN, -inf for
LOG_SUM / LOG_SUM_EXP.
"""
import math

import numpy as np

from native.tactics import simple_tactic


def _axes(op, inputs, ndim):
    """Normalised reduction axes (tuple) or None for all; `()` means 'no reduction' (noop_with_empty_axes)."""
    axes = op.params.get("axes")
    if len(inputs) > 1 and inputs[1] is not None:
        axes = np.asarray(inputs[1]).reshape(-1).tolist()
    if axes is None or len(axes) == 0:
        return () if op.params.get("noop_with_empty_axes") else None
    return tuple(sorted(int(a) % ndim for a in axes)) if ndim else None


def _fill(dtype, high):
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return np.inf if high else -np.inf
    if dtype.kind == "b":
        return high
    info = np.iinfo(dtype)
    return info.max if high else info.min


def _sum(x, axes, keep):
    return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype if x.dtype.kind != "b" else None)


def _max(x, axes, keep):
    if x.size == 0:
        return np.max(x, axis=axes, keepdims=keep, initial=_fill(x.dtype, False))
    return np.max(x, axis=axes, keepdims=keep)


def _min(x, axes, keep):
    if x.size == 0:
        return np.min(x, axis=axes, keepdims=keep, initial=_fill(x.dtype, True))
    return np.min(x, axis=axes, keepdims=keep)


def _prod(x, axes, keep):
    return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _avg(x, axes, keep):
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        count = x.size if axes is None else math.prod(x.shape[a] for a in axes)
        if axes is not None and count:   # np.mean's own two steps without its wrapper (~10 us a call: the
            s = np.add.reduce(x, axes, x.dtype, None, keep)   # squeeze-excite pools of mobilenets): same floats
            if type(s) is not np.ndarray:   # every axis, keepdims off: a numpy scalar, divided as a 0-d array
                s = np.asarray(s)
            if count < _EXACT_COUNT and s.dtype == np.float32:
                # np.mean divides by an intp in float64 and rounds to float32; a float32 division by the same
                # (exactly representable) count is correctly rounded too, so it gives those floats, without the
                # mixed-type loop's ~6 us of casting
                np.true_divide(s, np.float32(count), out=s)
            else:
                np.true_divide(s, np.intp(count), out=s, casting="unsafe")
            return s
        return np.mean(x, axis=axes, keepdims=keep, dtype=x.dtype)
    return np.mean(x, axis=axes, keepdims=keep).astype(x.dtype)


_EXACT_COUNT = 1 << 24   # counts below this are exact in float32


def _l1(x, axes, keep):
    return _sum(np.abs(x), axes, keep)


def _sum_square(x, axes, keep):
    return _sum(np.square(x), axes, keep)


def _l2(x, axes, keep):
    s = _sum(np.square(x), axes, keep)
    return np.sqrt(s) if s.dtype.kind == "f" else np.sqrt(s).astype(s.dtype)


def _log_sum(x, axes, keep):
    with np.errstate(divide="ignore"):
        return np.log(_sum(x, axes, keep))


def _log_sum_exp(x, axes, keep):
    if x.size == 0:
        with np.errstate(divide="ignore"):
            return np.log(_sum(np.exp(x), axes, keep))
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), m.dtype))
    e = np.exp(x - m)
    s = np.log(np.sum(e, axis=axes, keepdims=True, dtype=x.dtype))
    s += m
    return s if keep else np.squeeze(s, axis=axes if axes is not None else None)


REDUCERS = {"SUM": _sum, "MAX": _max, "MIN": _min, "PROD": _prod, "AVG": _avg, "L1": _l1, "L2": _l2,
            "SUM_SQUARE": _sum_square, "LOG_SUM": _log_sum, "LOG_SUM_EXP": _log_sum_exp}
# what an un-reduced (noop) op still does elementwise
_NOOP = {"L1": np.abs, "L2": np.abs, "SUM_SQUARE": np.square, "LOG_SUM": np.log}


@simple_tactic("Reduce")
def reduce(op, inputs):
    x = inputs[0]
    held = op.__dict__.get("_reduce_avg")
    if held is not None and type(x) is np.ndarray and x.shape == held[0] and x.dtype is held[1] and \
            (inputs[1] if len(inputs) > 1 else None) is held[2]:
        # a float mean at a shape seen before: _avg's two ufunc calls, its axes and divisor worked out once
        s = np.add.reduce(x, held[3], held[1], None, held[4])
        np.true_divide(s, held[5], out=s, casting="unsafe")
        return [s]
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    name = op.params["op"]
    if name == "AVG" and type(inputs[0]) is np.ndarray:
        _hold_avg(op, x, inputs)
    axes = _axes(op, inputs, x.ndim)
    if axes == ():
        fn = _NOOP.get(name)
        return [fn(x) if fn is not None else x]
    y = REDUCERS[name](x, axes, bool(op.params.get("keep_dims", True)))
    y = np.asarray(y)
    return [y if y.dtype == x.dtype else y.astype(x.dtype)]


def _hold_avg(op, x, inputs):
    """Keep on the op what a float32 / float64 mean of x's shape needs, where _avg's first branch computes it and
    the sum is an array (not every axis without keepdims): (shape, dtype, the axes input, axes, keepdims, the
    divisor _avg divides by: a float32 count, or an intp one for float64 and huge counts: the same floats)."""
    axes = _axes(op, inputs, x.ndim)
    keep = bool(op.params.get("keep_dims", True))
    if x.dtype not in _HELD_DTYPES or not axes or (not keep and len(axes) == x.ndim):
        return
    count = math.prod(x.shape[a] for a in axes)
    if not count:
        return
    div = np.float32(count) if count < _EXACT_COUNT and x.dtype == np.float32 else np.intp(count)
    op.__dict__["_reduce_avg"] = (x.shape, x.dtype, inputs[1] if len(inputs) > 1 else None, axes, keep, div)


_HELD_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@simple_tactic("ArgReduce")
def arg_reduce(op, inputs):
    p = op.params
    x = np.asarray(inputs[0])
    axis = int(p.get("axis", 0)) % max(x.ndim, 1)
    fn = np.argmax if p.get("op", "MAX") == "MAX" else np.argmin
    keep = bool(p.get("keep_dims", True))
    if p.get("select_last_index"):
        idx = fn(np.flip(x, axis), axis=axis, keepdims=keep)
        idx = (x.shape[axis] - 1) - idx
    else:
        idx = fn(x, axis=axis, keepdims=keep)
    return [np.asarray(idx, dtype=np.int64)]


def _softmax_last(x, axis, log, hard):
    if hard:
        idx = np.argmax(x, axis=axis, keepdims=True)
        y = np.zeros_like(x)
        np.put_along_axis(y, idx, 1, axis=axis)
        return y
    # np.max / np.sum are these ufunc reductions behind a Python wrapper (several us a call on short rows)
    m = np.maximum.reduce(x, axis, None, None, True)
    e = np.subtract(x, m)
    if log:
        s = np.exp(e)
        s = np.add.reduce(s, axis, None, None, True)
        np.log(s, out=s)
        e -= s
        return e
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis, None, None, True)
    return e


@simple_tactic("Softmax")
def softmax(op, inputs):
    """Softmax along `axis`; `flatten` (ONNX opset < 13) normalises over all dims from `axis` on, as a 2-D view."""
    p = op.params
    x = inputs[0]
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    axis = int(p.get("axis", -1)) % max(x.ndim, 1)
    log, hard = bool(p.get("log")), bool(p.get("hard"))
    if x.size == 0:   # nothing to normalise (e.g. a (1, 8, 0, 0) attention map): numpy's max refuses empty axes
        return [np.empty(x.shape, x.dtype if x.dtype.kind == "f" else np.float32)]
    if p.get("flatten") and x.ndim:
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        y = _softmax_last(x.reshape(lead, -1), 1, log, hard)
        return [y.reshape(x.shape)]
    if x.dtype.itemsize < 4 and x.dtype.kind == "f":
        return [_softmax_last(x.astype(np.float32), axis, log, hard).astype(x.dtype)]
    return [_softmax_last(x, axis, log, hard)]


@simple_tactic("Cumulative")
def cumulative(op, inputs):
    """Cumulative SUM/PROD along the axis in input 1; `exclusive` shifts by one, `reverse` runs from the end."""
    p = op.params
    x = np.asarray(inputs[0])
    axis = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None \
        else int(p.get("axis", 0))
    axis %= max(x.ndim, 1)
    fn = np.cumsum if p.get("op", "SUM") == "SUM" else np.cumprod
    if p.get("reverse"):
        x = np.flip(x, axis)
    y = fn(x, axis=axis, dtype=x.dtype)
    if p.get("exclusive"):
        ident = 0 if fn is np.cumsum else 1
        shifted = np.full_like(y, ident)
        src = [slice(None)] * y.ndim
        dst = [slice(None)] * y.ndim
        src[axis], dst[axis] = slice(None, -1), slice(1, None)
        shifted[tuple(dst)] = y[tuple(src)]
        y = shifted
    if p.get("reverse"):
        y = np.flip(y, axis).copy()
    return [y]
