"""MatrixMultiply "gemv-dot": a one-row [1, K] x [K, N] product with constant float32 weights as N dot products over
the weights stored transposed [N, K] at build time, with its [bias +] RELU / SIGMOID epilogue, in one compiled call
(native/cpu/jit_gemv.py, the numba extra).

Why: openwakeword's classifiers (oww_hey_jarvis, oww_alexa) are a [1, 1536] x [1536, 128 / 64] GEMV and a few small
layers; OpenBLAS (9.4 / 5.4 us with the layer's overhead) and packed-gemm-direct (9.1 / 5.1) both stream [K, N]
rows into an [N] sum held in memory, while a dot product per output keeps its sum in registers: 5.2 / 3.2 us for
the kernel (numpy's matmul 7.8 / 3.8; one thread, unpinned OpenBLAS). Its floats are its own (lane sums, fused
multiply-adds), so it is a tactic the builder times against the others; the numpy path never takes it.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.matmul import _direct_epilogue, direct_refusal
from native.tactics import Tactic, register_tactic

_NO_BIAS = np.zeros(0, np.float32)
_F32 = np.dtype(np.float32)


@register_tactic
class GemvDot(Tactic):
    """[bias +] activation(a @ b) for a one-row a as dot products over b^T's rows (float32, numba extra)."""
    kind = "MatrixMultiply"
    name = "gemv-dot"
    precisions = ("float32",)
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = direct_refusal(op, input_shapes, "bt_gemv")
        if why:
            return why
        if any(d is None or d != 1 for d in input_shapes[0][:-1]):
            return "one row only (a left operand [.., 1, K] of known shape)"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = dict(op.weights)
        if "bt_gemv" in w:
            return w
        b = w.pop("b")
        w["bt_gemv"] = np.ascontiguousarray(b if op.params.get("transpose_b") else b.T, np.float32)
        bias = _direct_epilogue(op)[0]
        if bias is not None:
            w[op.params["post_ops"][0]["weight"]] = np.ascontiguousarray(bias, np.float32)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        cfg = op.__dict__.get("_gemv_dot")
        if cfg is None or cfg[0] is not op.weights:   # per op, once: its weights, bias and epilogue codes
            bias, act, other = _direct_epilogue(op)
            bt = op.weights["bt_gemv"]
            cfg = op.__dict__["_gemv_dot"] = (op.weights, bt, _NO_BIAS if bias is None else bias, bias is not None,
                                              act, other, bt.shape[0], jit.kernel("gemv_dot"), (1, bt.shape[0]))
        _, bt, bias, has_bias, act, other, n, fn, row = cfg
        a = inputs[0]
        if a.dtype is not _F32 and a.dtype != _F32:   # (numpy's float32 dtype is one object: `is` first)
            a = a.astype(np.float32)
        if a.ndim == 2 and a.strides[1] == 4:   # already [1, K] with a unit-stride row: no views to make
            a2, shape = a, row
        else:
            shape = a.shape[:-1] + (n,)
            a2 = a.reshape(1, -1)
            if a2.strides[1] != 4:
                a2 = np.ascontiguousarray(a2)
        y = outputs[0] if outputs is not None else None
        if y is None or y.shape != shape or (y.dtype is not _F32 and y.dtype != _F32) or not y.flags.c_contiguous:
            y = np.empty(shape, np.float32)
        fn(a2, bt, bias, has_bias, act, y if shape is row else y.reshape(row))
        if other is not None:
            res = activation_inplace(y, other["type"], other.get("alpha", 0.0), other.get("beta", 0.0))
            if res is not y:
                y[...] = res
        return [y]
