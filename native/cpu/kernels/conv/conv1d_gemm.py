"""The conv1d-gemm tactic: a 1-D convolution run as a 2-D one of height 1 through the banded GEMM driver.

im2col-gemm's N-d path gathers the column matrix one kernel tap at a time in Python: a 1-D convolution with a long
kernel (an STFT written as Conv, a polyphase resampler: 64-512 taps) costs hundreds of strided copies per call. As a
2-D convolution over [N, C, 1, L] with kernel [1, k], `conv2d_gemm` builds the same patch matrix with one strided
copy per band and runs the GEMMs straight into the output (bias in the GEMM, epilogue in place). A different
computation from im2col-gemm's (the bias rides in the GEMM), so the builder's timing chooses between them.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.gemm2d import conv2d_gemm
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.im2col_gemm import Im2colGemm
from native.cpu.kernels.conv.weights import (bias_in_gemm, gemm_scale, gemm_weights, kernel_and_bias, kernel_spatial,
                                             pack_gemm, work_dtype)
from native.tactics import Tactic, register_tactic


@register_tactic
class Conv1dGemm(Tactic):
    """[N, C, L] convolutions (any stride, dilation, groups, pads >= 0) as [N, C, 1, L] through conv2d_gemm."""
    kind, name = "Convolution", "conv1d-gemm"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        ks = op.params.get("kernel_shape")
        if ks is not None and len(ks) != 1:
            return "1-D convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 3:
            return "[N, C, L] inputs only"
        if op.params.get("integer"):
            return "float convolutions only"
        if any(s["op"] == "add" or (s["op"] == "bias" and s.get("axis", 1) != 1)
               for s in op.params.get("post_ops") or ()):
            return "residual adds and non-channel biases are fused into 2-D layouts only"
        return None

    def prepare(self, op):
        return pack_gemm(op)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if x.ndim != 3 or len(ks) != 1 or dtype.itemsize < 4 or min(pre) < 0 or min(post) < 0:
            return Im2colGemm.run(self, op, inputs)   # the general path (cropping pads, half types)
        g = op.params.get("groups", 1) or 1
        biased = bias_in_gemm(op)
        dst = outputs[0] if outputs else None
        if dst is not None:
            dst = dst[:, :, None, :] if dst.ndim == 3 and dst.flags.c_contiguous else None
        y = conv2d_gemm(op, x[:, :, None, :], gemm_weights(op, w, g, dtype, raw=True), None if biased else b,
                        [1, ks[0]], [1, strides[0]], [1, dil[0]], [0, pre[0]], [0, post[0]], [1, out[0]], inputs,
                        scale=gemm_scale(op), bias_col=biased, dst=dst)[0]
        return [y.reshape(y.shape[0], y.shape[1], y.shape[3])]
