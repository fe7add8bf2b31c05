"""CPU kernels: normalization (batch / instance / layer / group / RMS / Lp / mean-variance), Scale and LRN.

Statistics are computed in float64 (the ONNX stash_type asks for at least float32) and the result is cast back
to the input's dtype, so float16 / bfloat16 inputs do not lose accuracy in the reductions.
"""
from __future__ import annotations

import math

import numpy as np

from native.cpu import jit
from native.cpu.kernels import rows
from native.cpu.kernels.activations import activation_inplace
from native.tactics import Tactic, register_tactic, simple_tactic

_ADD_REDUCE = np.add.reduce

_F32 = np.dtype(np.float32)


def _bcast(v, ndim, axis):
    """A per-channel vector shaped to broadcast along `axis` of an ndim tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(v).reshape(shape)


def _batch(x, inputs, p):
    scale, bias, mean, var = [np.asarray(v, np.float64) for v in inputs[1:5]]
    eps = p.get("epsilon", 1e-5)
    if not p.get("training_mode"):
        # inference: a per-channel affine map; coefficients in float64, the pass itself in the input's float
        # type (float32 keeps ~1 ulp; no float64 copy of the tensor), two in-place passes
        inv = scale / np.sqrt(var + eps)
        shift = bias - mean * inv
        if x.dtype == np.float32 and x.ndim >= 2 and x.flags.c_contiguous and x.size:
            fn = jit.kernel("channel_affine")   # the two passes below in one compiled loop: the same floats
            if fn is not None:
                y = np.empty_like(x)
                shape3 = (x.shape[0], x.shape[1], -1)
                fn(x.reshape(shape3), inv.astype(np.float32), shift.astype(np.float32), y.reshape(shape3))
                return [y]
        if x.dtype in (np.float32, np.float64) and x.ndim >= 2:
            y = np.multiply(x, _bcast(inv.astype(x.dtype), x.ndim, 1))
            y += _bcast(shift.astype(x.dtype), x.ndim, 1)
            return [y]
        y = x.astype(np.float64) * _bcast(inv, x.ndim, 1) + _bcast(shift, x.ndim, 1)
        return [y.astype(x.dtype)]
    xf = x.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    bm = xf.mean(axis=axes)
    bv = xf.var(axis=axes)
    y = (xf - _bcast(bm, x.ndim, 1)) / np.sqrt(_bcast(bv, x.ndim, 1) + eps) * _bcast(scale, x.ndim, 1) \
        + _bcast(bias, x.ndim, 1)
    mom = p.get("momentum", 0.9)
    run_mean = mean * mom + bm * (1 - mom)
    run_var = var * mom + bv * (1 - mom)
    return [y.astype(x.dtype), run_mean.astype(inputs[3].dtype), run_var.astype(inputs[4].dtype)]


def _standardize(xf, axes, eps):
    mean = xf.mean(axis=axes, keepdims=True)
    d = xf - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    return d * inv, mean, inv


def _layer(x, inputs, p):
    ndim = x.ndim
    axis = p.get("axes", [-1])[0] % ndim
    axes = tuple(range(axis, ndim))
    if x.dtype == np.float32 and p.get("stash_type", 1) == 1:
        return _layer_f32(x, inputs, axes, p.get("epsilon", 1e-5))
    xf = x.astype(np.float64)
    y, mean, inv = _standardize(xf, axes, p.get("epsilon", 1e-5))
    if len(inputs) > 1 and inputs[1] is not None:
        y = y * np.asarray(inputs[1], np.float64)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + np.asarray(inputs[2], np.float64)
    stat_dtype = np.float32 if p.get("stash_type", 1) == 1 else x.dtype
    return [y.astype(x.dtype), mean.astype(stat_dtype), inv.astype(stat_dtype)]


def _layer_f32(x, inputs, axes, eps):
    """LayerNorm of a float32 tensor in float32 (the ONNX stash_type): numpy's pairwise-summed mean, then the
    variance of the centred values (two passes: no E[x^2] - E[x]^2 cancellation), all in place on one buffer.
    The mean is `np.mean`'s own two steps (add.reduce, then true_divide by the count as an intp) without its
    Python wrapper, and the row length a Python product: the same floats, ~20 us less per call, which transformers'
    short rows ([tokens, 128..768]) pay once per LayerNorm."""
    shape = x.shape
    lead = shape[:axes[0]]
    n = math.prod(shape[axes[0]:])
    x2 = x.reshape(lead + (n,))          # (not -1: an empty batch leaves -1 undetermined)
    mean = _ADD_REDUCE(x2, -1, None, None, True)     # keepdims: always an array
    np.true_divide(mean, np.intp(n), out=mean, casting="unsafe")
    d = np.subtract(x2, mean)
    var = np.einsum("...i,...i->...", d, d)[..., None]
    var /= np.float32(n)
    var += np.float32(eps)
    inv = np.sqrt(var, out=var)
    np.divide(np.float32(1), inv, out=inv)
    d *= inv
    y = d.reshape(shape)
    if len(inputs) > 1 and inputs[1] is not None:
        y *= _f32(inputs[1])
    if len(inputs) > 2 and inputs[2] is not None:
        y += _f32(inputs[2])
    stat_shape = lead + (1,) * len(axes)
    return [y, mean.reshape(stat_shape), inv.reshape(stat_shape)]


def _f32(v):
    return v if type(v) is np.ndarray and v.dtype == np.float32 else np.asarray(v, np.float32)


def _instance(x, inputs, p):
    xf = x.astype(np.float64)
    y, _, _ = _standardize(xf, tuple(range(2, x.ndim)), p.get("epsilon", 1e-5))
    y = y * _bcast(np.asarray(inputs[1], np.float64), x.ndim, 1) + _bcast(np.asarray(inputs[2], np.float64), x.ndim, 1)
    return [y.astype(x.dtype)]


def _group(x, inputs, p):
    n, c = x.shape[:2]
    g = int(p.get("num_groups", 1))
    xf = x.astype(np.float64).reshape(n, g, -1)
    y, _, _ = _standardize(xf, (2,), p.get("epsilon", 1e-5))
    y = y.reshape(x.shape)
    scale, bias = (np.asarray(v, np.float64) for v in inputs[1:3])
    if scale.size == g and g != c:        # opset 18: one scale per group
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    y = y * _bcast(scale, x.ndim, 1) + _bcast(bias, x.ndim, 1)
    return [y.astype(x.dtype)]


def _rms(x, inputs, p):
    ndim = x.ndim
    axis = p.get("axes", [-1])[0] % ndim
    xf = x.astype(np.float64)
    ms = (xf * xf).mean(axis=tuple(range(axis, ndim)), keepdims=True)
    y = xf / np.sqrt(ms + p.get("epsilon", 1e-5))
    if len(inputs) > 1 and inputs[1] is not None:
        y = y * np.asarray(inputs[1], np.float64)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + np.asarray(inputs[2], np.float64)
    return [y.astype(x.dtype)]


def _lp(x, inputs, p):
    axis = p.get("axes", [-1])[0]
    order = int(p.get("p", 2))
    xf = x.astype(np.float64)
    norm = np.sum(np.abs(xf) ** order, axis=axis, keepdims=True) ** (1.0 / order)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(norm == 0, 0, xf / norm)
    return [y.astype(x.dtype)]


def _mvn(x, inputs, p):
    axes = tuple(a % x.ndim for a in p.get("axes", [0, 2, 3]))
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = (xf * xf).mean(axis=axes, keepdims=True) - mean * mean
    y = (xf - mean) / (np.sqrt(np.maximum(var, 0)) + p.get("epsilon", 1e-9))
    return [y.astype(x.dtype)]


_MODES = {"BATCH": _batch, "LAYER": _layer, "INSTANCE": _instance, "GROUP": _group, "RMS": _rms, "LP": _lp,
          "MVN": _mvn}


@simple_tactic("Normalization", name="float64-stats", honours=("post_ops",))
def normalization(op, inputs):
    """Dispatch on params['mode']; returns as many outputs as the mode defines (extra ones are ignored)."""
    x = np.asarray(inputs[0])
    return post_activation(op, _MODES[op.params.get("mode", "LAYER")](x, inputs, op.params))


def post_activation(op, outs):
    """outs with params['post_ops'] (activation steps: fusion_epilogue.fuse_norm_activation) applied to the
    normalized result in place, as the Activation layer they replace computes them."""
    post = op.params.get("post_ops")
    if post:
        y = outs[0]
        for step in post:
            y = activation_inplace(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
        outs = [y] + list(outs[1:])
    return outs


@register_tactic
class LayerNormLaneStats(Tactic):
    """LayerNormalization of float32 rows (stash_type float32) by native/cpu/polyexp.py's layernorm_rows: mean and
    variance as 8-lane float32 sums (not numpy's pairwise ones, so a tactic of its own), one compiled pass per row
    with the numba extra, the same floats in numpy passes without it."""
    kind = "Normalization"
    name = "lane-stats"
    honours = frozenset({"post_ops"})

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("mode", "LAYER") != "LAYER" or p.get("stash_type", 1) != 1:
            return "LayerNormalization with float32 statistics only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return f"float32 input only, not {dtypes[0]}"
        return None

    def run(self, op, inputs):
        x = inputs[0]
        if type(x) is not np.ndarray:
            x = np.asarray(x)
        if x.dtype is not _F32 and x.dtype != _F32:   # (numpy's float32 dtype is one object: `is` first)
            return normalization(op, inputs)
        k = len(inputs)
        g_in = inputs[1] if k > 1 else None
        b_in = inputs[2] if k > 2 else None
        cfg = op.__dict__.get("_lane_stats")
        if cfg is None or cfg[0] != x.shape or cfg[1] is not g_in or cfg[2] is not b_in:
            # per op and input shape, once (gamma / beta are constants: the same arrays every run): the row
            # geometry and the float32 [n] parameters, so a short row pays only the compiled pass
            ndim = x.ndim
            axis = op.params.get("axes", [-1])[0] % ndim
            lead, tail = x.shape[:axis], x.shape[axis:]
            n, m = math.prod(tail), math.prod(lead)
            if n == 0 or m == 0:
                return normalization(op, inputs)
            g, b = (_row_param(v, tail, n) if v is not None else None for v in (g_in, b_in))
            g = g if g is not None else np.ones(n, np.float32)
            b = b if b is not None else np.zeros(n, np.float32)
            post = op.params.get("post_ops") or ()
            relu = len(post) == 1 and post[0]["op"] == "activation" and post[0]["type"] == "RELU"
            fn = jit.kernel("layernorm_rows_relu" if relu else "layernorm_rows")
            stat_shape = lead + (1,) * len(tail)
            flat = len(x.shape) == 2 and len(stat_shape) == 2   # [m, n] rows: no views to make (a classifier's [1, n])
            cfg = op.__dict__["_lane_stats"] = (x.shape, g_in, b_in, m, n, g, b, op.params.get("epsilon", 1e-5),
                                                stat_shape, fn,
                                                np.float32(op.params.get("epsilon", 1e-5)), np.float32(n),
                                                relu and fn is not None, flat, (m, n), (2, m, 1) if flat else (2, m))
        shape, _, _, m, n, g, b, eps, stat_shape, fn, eps32, n32, relu_done, flat, mn, stats_shape = cfg
        if fn is not None and x.flags.c_contiguous:   # rows.layernorm_rows' compiled call, without its lookups
            x2 = x if flat else x.reshape(mn)
            y, stats = np.empty(mn, np.float32), np.empty(stats_shape, np.float32)
            mean, inv = stats[0], stats[1]
            if flat:
                fn(x2, g, b, eps32, n32, y, mean.reshape(m), inv.reshape(m))
            else:
                fn(x2, g, b, eps32, n32, y, mean, inv)   # a lone RELU post-op applied in the same pass
            if relu_done:
                if flat:
                    return [y, mean, inv]
                return [y.reshape(shape), mean.reshape(stat_shape), inv.reshape(stat_shape)]
        else:
            x2 = (x if x.flags.c_contiguous else np.ascontiguousarray(x)).reshape(m, n)
            y, mean, inv = rows.layernorm_rows(x2, g, b, eps, np.empty_like(x2))
        return post_activation(op, [y.reshape(shape), mean.reshape(stat_shape), inv.reshape(stat_shape)])


def _row_param(v, tail, n):
    """gamma / beta as a C-contiguous float32 [n] over the normalized axes (broadcast when given smaller)."""
    v = _f32(v)
    if v.shape != tuple(tail):
        v = np.broadcast_to(v, tail)
    return np.ascontiguousarray(v).reshape(n)


@simple_tactic("Scale", name="numpy")
def scale(op, inputs):
    """y = (x * scale + shift) ** power per channel (mode CHANNEL), per element (ELEMENTWISE) or uniform."""
    x = np.asarray(inputs[0])
    axis = op.params.get("channel_axis", 1) % x.ndim
    mode = op.params.get("mode", "CHANNEL")

    def shaped(v):
        v = np.asarray(v, x.dtype)
        return _bcast(v, x.ndim, axis) if mode == "CHANNEL" and v.ndim == 1 and v.size > 1 else v

    y = x
    if "scale" in op.weights:
        y = y * shaped(op.weights["scale"])
    if "shift" in op.weights:
        y = y + shaped(op.weights["shift"])
    if "power" in op.weights:
        y = y ** shaped(op.weights["power"])
    return [np.asarray(y, x.dtype)]


@simple_tactic("LRN", name="channel-taps")
def lrn(op, inputs):
    """y = x / (k + alpha / size * sum of x^2 over a channel window) ** beta; loops over the window taps."""
    x = np.asarray(inputs[0])
    size = int(op.params.get("window", 5))
    sq = x.astype(np.float64) ** 2
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    width = [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2)
    sp = np.pad(sq, width)
    c = x.shape[1]
    acc = np.zeros_like(sq)
    for t in range(size):
        acc += sp[:, t:t + c]
    p = op.params
    y = x / (p.get("k", 1.0) + p.get("alpha", 1e-4) / size * acc) ** p.get("beta", 0.75)
    return [y.astype(x.dtype)]
