"""Alternative tactics for reductions, softmax and layer norm: the same maths, another summation order.

  Reduce "sequential"       SUM/AVG/SUM_SQUARE/L1/L2 accumulated along the axis one slice at a time (the naive
                            loop: error grows ~n*eps), against the default "numpy" tactic's pairwise sums (~log n).
  Softmax "online"          one pass over the axis keeping a running max and a rescaled running sum (the
                            streaming / flash-attention formulation), against the default two-pass max-then-sum.
  Normalization "welford"   LAYER mode in float32 with Welford's running mean/variance, one sweep along the axis,
                            against "float64-stats" (two passes in float64 / pairwise float32).
Each agrees with the reference within its own bound (tests/native/test_reduce_tactics.py) and differs from the
default tactic in the last bits, so a build that picks them is a different engine, numerically.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.norm import post_activation
from native.tactics import Tactic, register_tactic

_SEQ = ("SUM", "AVG", "SUM_SQUARE", "L1", "L2")
MAX_LOOP = 2048   # these tactics loop in Python over the reduced axis: beyond this they only slow the build down


def _sequential_sum(x, axes, keep):
    """Sum over `axes` by adding one slice after another (float32 stays float32)."""
    moved = np.moveaxis(x, axes, tuple(range(len(axes))))
    flat = moved.reshape((-1,) + moved.shape[len(axes):])
    acc = np.array(flat[0], copy=True)
    for i in range(1, flat.shape[0]):
        acc += flat[i]
    if keep:
        shape = list(x.shape)
        for a in axes:
            shape[a] = 1
        acc = acc.reshape(shape)
    return acc


@register_tactic
class SequentialReduce(Tactic):
    """Sums accumulated slice by slice along the reduced axes (the naive loop's rounding)."""
    kind, name = "Reduce", "sequential"

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _SEQ:
            return f"only {'/'.join(_SEQ)}"
        if not op.params.get("axes") or not input_shapes or input_shapes[0] is None:
            return "needs constant axes and the input shape"
        n = int(np.prod([input_shapes[0][a % len(input_shapes[0])] for a in op.params["axes"]]))
        if n > MAX_LOOP:
            return f"{n} slices to add: the per-slice loop is too slow above {MAX_LOOP}"
        if op.params.get("noop_with_empty_axes"):
            return "noop_with_empty_axes"
        return None

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        dtype = x.dtype
        xf = x if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else x.astype(np.float32)
        axes = tuple(sorted(a % max(x.ndim, 1) for a in op.params["axes"]))
        keep = bool(op.params.get("keep_dims", True))
        name = op.params["op"]
        if name in ("L1", "L2"):
            xf = np.abs(xf)
        if name in ("SUM_SQUARE", "L2"):
            xf = xf * xf
        y = _sequential_sum(xf, axes, keep)
        if name == "AVG":
            y = y / np.asarray(int(np.prod([x.shape[a] for a in axes])), y.dtype)
        elif name == "L2":
            y = np.sqrt(y)
        return [np.asarray(y).astype(dtype, copy=False)]


def online_softmax(x, axis, log=False):
    """Softmax with a running max m and running sum s = sum exp(x - m), rescaled when m grows."""
    xm = np.moveaxis(x, axis, 0)
    m = np.array(xm[0], copy=True)
    s = np.ones_like(m)
    for i in range(1, xm.shape[0]):
        v = xm[i]
        new_m = np.maximum(m, v)
        s = s * np.exp(m - new_m) + np.exp(v - new_m)
        m = new_m
    if log:
        y = xm - m - np.log(s)
    else:
        y = np.exp(xm - m) / s
    return np.moveaxis(y, 0, axis)


@register_tactic
class OnlineSoftmax(Tactic):
    """One pass: running max and rescaled running sum (streaming softmax), then the normalisation."""
    kind, name = "Softmax", "online"
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("hard") or p.get("flatten"):
            return "hard / flattened softmax: use the default"
        if input_shapes and input_shapes[0] is not None:
            ax = int(p.get("axis", -1)) % max(len(input_shapes[0]), 1)
            if input_shapes[0] and input_shapes[0][ax] > MAX_LOOP:
                return f"axis longer than {MAX_LOOP}: the per-element loop is too slow"
        return None

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        xf = x.astype(np.float32) if x.dtype != np.float32 else x
        axis = int(op.params.get("axis", -1)) % max(x.ndim, 1)
        return [online_softmax(xf, axis, bool(op.params.get("log"))).astype(x.dtype, copy=False)]


def welford_layernorm(x, axis, eps, scale=None, bias=None):
    """LayerNorm over dims axis.. with Welford's running mean / M2 in float32, one sweep."""
    lead = x.shape[:axis]
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    xf = x.reshape(lead + (n,)).astype(np.float32, copy=False)   # (not -1: undetermined for an empty batch)
    mean = np.zeros(lead, np.float32)
    m2 = np.zeros(lead, np.float32)
    for i in range(n):
        v = xf[..., i]
        d = v - mean
        mean += d / np.float32(i + 1)
        m2 += d * (v - mean)
    inv = (np.float32(1) / np.sqrt(m2 / np.float32(n) + np.float32(eps))).astype(np.float32)
    y = ((xf - mean[..., None]) * inv[..., None]).reshape(x.shape)
    if scale is not None:
        y = y * np.asarray(scale, np.float32)
    if bias is not None:
        y = y + np.asarray(bias, np.float32)
    stat = lead + (1,) * (x.ndim - axis)
    return y, mean.reshape(stat), inv.reshape(stat)


@register_tactic
class WelfordLayerNorm(Tactic):
    """LAYER normalisation of float32 tensors with Welford's one-sweep statistics."""
    kind, name = "Normalization", "welford"
    precisions = ("float32",)
    honours = frozenset({"post_ops"})

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("mode", "LAYER") != "LAYER":
            return "LAYER mode only"
        if input_shapes and input_shapes[0] is not None:
            axis = p.get("axes", [-1])[0] % len(input_shapes[0])
            if int(np.prod(input_shapes[0][axis:])) > MAX_LOOP:
                return f"normalised size above {MAX_LOOP}: the per-element loop is too slow"
        return None

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        axis = op.params.get("axes", [-1])[0] % x.ndim
        scale = inputs[1] if len(inputs) > 1 else None
        bias = inputs[2] if len(inputs) > 2 else None
        y, mean, inv = welford_layernorm(x, axis, op.params.get("epsilon", 1e-5), scale, bias)
        return post_activation(op, [y.astype(x.dtype, copy=False), mean, inv])
