"""The SqueezeExcite layer (backends/engine/builder/passes/fusion_se.py): y = x * act2(W2 @ act1(W1 @ mean_hw(x) + b1)
+ b2), one layer for the four a squeeze-and-excitation block is made of.

The tactic runs the numpy operations the four layers' default CPU tactics run, in the same order and on operands
of the same shapes: the mean as the Reduce tactic's (or, for a global average Pooling, the pooling tactic's
float64) add.reduce and division, each 1x1 product as the 1x1-gemm tactic's small path (one [1, M, C] @ [1, C, 1]
matmul per sample), then + bias and the activations in place, and x * gate as the ElementWise tactic's multiply.
So the output is the four layers' output; what goes is their per-layer cost (dispatch, three arena tensors, four
epilogues' bookkeeping), which is most of a squeeze-excite block's time on a small model.
"""
from __future__ import annotations

import math

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_into
from native.tactics import Tactic, register_tactic


def mean_hw(x, float64):
    """[N, C, 1, 1]: the mean over H, W as the Reduce AVG tactic computes it (float64: as global average Pooling)."""
    count = np.intp(math.prod(x.shape[2:]))
    if float64:
        s = np.add.reduce(x, (2, 3), np.float64, None, True)
        np.true_divide(s, count, out=s, casting="unsafe")
        return s.astype(x.dtype)
    s = np.add.reduce(x, (2, 3), x.dtype, None, True)
    np.true_divide(s, count, out=s, casting="unsafe")
    return s


def dense(w, b, steps, v):
    """act(w @ v + b) for every sample of v [N, K, 1] (w [1, M, K]): [N, M, 1], the 1x1-gemm small path's floats."""
    out = np.empty((v.shape[0], w.shape[1], 1), v.dtype)
    for ni in range(v.shape[0]):
        np.matmul(w, v[ni:ni + 1], out=out[ni:ni + 1])
    if b is not None:
        out += b
    for s in steps:
        activation_into(out, s)
    return out


@register_tactic
class SqueezeExciteFused(Tactic):
    """The four layers' numpy operations in one call (see the module doc)."""
    kind, name = "SqueezeExcite", "se-fused"
    writes_outputs = True

    def supports(self, op, input_shapes):
        s = input_shapes[0] if input_shapes else None
        if s is not None and len(s) != 4:
            return "4-D (NCHW) inputs only"
        return None

    def prepare(self, op):
        """The kernels as [1, M, K] matmul operands and the biases as [M, 1] columns, made once."""
        w = dict(op.weights)
        for key in ("squeeze_kernel", "excite_kernel"):
            k = np.asarray(w[key], np.float32)
            w[key] = np.ascontiguousarray(k.reshape((1,) + k.shape[-2:]))
        for key in ("squeeze_bias", "excite_bias"):
            if key in w:
                w[key] = np.asarray(w[key], np.float32).reshape(-1, 1)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        wt, p = op.weights, op.params
        n, c = x.shape[:2]
        s = mean_hw(x, p.get("mean_dtype") == "float64")
        h = dense(_kernel(wt, "squeeze_kernel"), _bias(wt, "squeeze_bias"), p.get("squeeze_ops") or (),
                  s.reshape(n, c, 1))
        g = dense(_kernel(wt, "excite_kernel"), _bias(wt, "excite_bias"), p.get("excite_ops") or (), h)
        dst = outputs[0] if outputs else None
        if dst is None or dst.shape != x.shape or dst.dtype != x.dtype:
            dst = np.empty(x.shape, x.dtype)
        np.multiply(x, g.reshape(n, c, 1, 1), out=dst)
        return [dst]


def _kernel(weights, key):
    k = weights[key]
    return k if k.ndim == 3 else np.ascontiguousarray(np.asarray(k, np.float32).reshape((1,) + k.shape[-2:]))


def _bias(weights, key):
    b = weights.get(key)
    if b is None or b.ndim == 2:
        return b
    return np.asarray(b, np.float32).reshape(-1, 1)


_DIRECT_ACTS = {"RELU": 1, "HARD_SIGMOID": 2, "HARD_SWISH": 3, "CLIP": 4}
_NUMBER = (int, float)


def _direct_acts(steps):
    """[k, 3] rows (code, alpha, beta) of jit_se's activations, or None when a step is not one of them."""
    rows = []
    for s in steps or ():
        code, a, b = _DIRECT_ACTS.get(s.get("type")), s.get("alpha", 0.0), s.get("beta", 0.0)
        if code is None or type(a) not in _NUMBER or type(b) not in _NUMBER:
            return None
        rows.append((code, a, b))
    return np.array(rows, np.float64).reshape(-1, 3)


@register_tactic
class SqueezeExciteDirect(Tactic):
    """The block as one compiled call (native/cpu/jit_se.py; numba extra): the mean by float64 running sums, the two
    products as float32 running sums over the packed transposed kernels, the activations and the scale in the same
    loop. Its own floats (not se-fused's numpy reduction and GEMM), so the builder's timing chooses it. float32,
    RELU / HARD_SIGMOID / HARD_SWISH / CLIP activations."""
    kind, name = "SqueezeExcite", "se-direct"
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        s = input_shapes[0] if input_shapes else None
        if s is not None and len(s) != 4:
            return "4-D (NCHW) inputs only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 input only"
        if _direct_acts(op.params.get("squeeze_ops")) is None or _direct_acts(op.params.get("excite_ops")) is None:
            return "activations other than RELU, HARD_SIGMOID, HARD_SWISH, CLIP"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        """The kernels transposed ([K, M]: the products run vectorised over M), biases flat, activation rows."""
        w = dict(op.weights)
        for key, packed in (("squeeze_kernel", "squeeze_kernel_t"), ("excite_kernel", "excite_kernel_t")):
            k = np.asarray(w[key], np.float32)
            w[packed] = np.ascontiguousarray(k.reshape(k.shape[-2:]).T)
        for key in ("squeeze_bias", "excite_bias"):
            if key in w:
                w[key] = np.ascontiguousarray(np.asarray(w[key], np.float32).reshape(-1))
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.ascontiguousarray(inputs[0], np.float32)
        held = op.__dict__.get("_se_direct")
        if held is None:
            wt, p = op.weights, op.params
            w1t, w2t = (wt[k] if k in wt else np.ascontiguousarray(np.asarray(wt[k[:-2]], np.float32).reshape(
                np.shape(wt[k[:-2]])[-2:]).T) for k in ("squeeze_kernel_t", "excite_kernel_t"))
            b1, b2 = (np.ascontiguousarray(np.asarray(wt[k], np.float32).reshape(-1)) if k in wt
                      else np.empty(0, np.float32) for k in ("squeeze_bias", "excite_bias"))
            held = op.__dict__["_se_direct"] = (w1t, b1, w2t, b2, _direct_acts(p.get("squeeze_ops")),
                                                _direct_acts(p.get("excite_ops")))
        dst = outputs[0] if outputs else None
        if dst is None or dst.shape != x.shape or dst.dtype != x.dtype or not dst.flags.c_contiguous:
            dst = np.empty(x.shape, x.dtype)
        n, c = x.shape[:2]
        w1t, b1, w2t, b2, a1, a2 = held
        jit.kernel("se_direct")(x.reshape(n, c, -1), w1t, b1, w2t, b2, a1, a2, dst.reshape(n, c, -1))
        return [dst]
