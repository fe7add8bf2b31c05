"""The 1x1-gemm tactic: a pointwise convolution as a direct GEMM on the (strided) input, no column matrix."""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.gemm2d import conv2d_gemm
from native.cpu.kernels.conv.weights import (bias_in_gemm, gemm_scale, gemm_weights, kernel_and_bias, pack_gemm,
                                             work_dtype)
from native.tactics import Tactic, register_tactic


def is_pointwise(op, input_shapes):
    ks = op.params.get("kernel_shape") or []
    return (bool(ks) and all(k == 1 for k in ks) and not op.params.get("integer")
            and (op.params.get("auto_pad") or "NOTSET") in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
            and not any(op.params.get("pre_padding") or []) and not any(op.params.get("post_padding") or []))


@register_tactic
class PointwiseGemm(Tactic):
    """1x1 convolution: y[n] = W[M, C] @ x[n].reshape(C, H*W); strides by slicing, no column matrix."""
    kind, name = "Convolution", "1x1-gemm"
    honours = {"post_ops", "side"}
    writes_outputs = True   # the 2-D fast path GEMMs straight into the planned buffer

    def supports(self, op, input_shapes):
        return is_pointwise(op, input_shapes)

    def prepare(self, op):
        return pack_gemm(op)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        g = op.params.get("groups", 1) or 1
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides = op.params.get("strides") or [1] * (x.ndim - 2)
        if x.ndim == 4 and x.dtype.itemsize >= 4:
            out = [(x.shape[2] - 1) // strides[0] + 1, (x.shape[3] - 1) // strides[1] + 1]
            biased = bias_in_gemm(op)
            return conv2d_gemm(op, x, gemm_weights(op, w, g, dtype, raw=True), None if biased else b, [1, 1],
                               list(strides), [1, 1], [0, 0], [0, 0], out, inputs, pointwise=True,
                               scale=gemm_scale(op), bias_col=biased,
                               dst=outputs[0] if outputs else None)
        if any(s != 1 for s in strides):
            x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
        out = x.shape[2:]
        n, c = x.shape[:2]
        wm = gemm_weights(op, w, g, dtype)
        y = np.matmul(wm, x.reshape(n, g, c // g, -1))
        y = y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(out))
        return finish(op, y, b, inputs, x.dtype)
