"""The im2col-gemm tactic: gather the kh*kw shifted views of the padded input into one column matrix and do one
BLAS GEMM per batch item and group. The general tactic: groups, dilations, strides, 1-D/2-D/3-D, ConvInteger."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.flat_patches import FlatPatches
from native.cpu.kernels.conv.geometry import geometry, pad_input, tap_slices
from native.cpu.kernels.conv.gemm2d import conv2d_gemm, fast_path_ok, recipe
from native.cpu.kernels.conv.weights import (bias_in_gemm, gemm_scale, gemm_weights, integer_inputs, kernel_and_bias,
                                             kernel_spatial, pack_gemm, work_dtype)
from native.tactics import Tactic, register_tactic


@register_tactic
class Im2colGemm(Tactic):
    """Column matrix of all kernel taps, then one batched BLAS GEMM."""
    kind, name = "Convolution", "im2col-gemm"
    honours = {"post_ops", "side", "integer"}
    writes_outputs = True   # the 2-D fast path GEMMs straight into the planned buffer

    def prepare(self, op):
        return pack_gemm(op)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        fast = recipe(op, "_flat_patches", x, inputs, FlatPatches.make) if x.ndim == 4 else None
        if fast is not None and fast.residual_ok(op, inputs):
            return fast.run(op, x, outputs, inputs)
        w, b = kernel_and_bias(op, inputs)
        if op.params.get("integer"):
            x, w = integer_inputs(op, x, w, inputs)
        ks = kernel_spatial(op, w)
        g = op.params.get("groups", 1) or 1
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if fast_path_ok(op, x, ks, pre, post):
            biased = bias_in_gemm(op)
            return conv2d_gemm(op, x, gemm_weights(op, w, g, dtype, raw=True), None if biased else b, ks, strides,
                               dil, pre, post, out, inputs, scale=gemm_scale(op), bias_col=biased,
                               dst=outputs[0] if outputs else None)
        xp = pad_input(x, pre, post)
        n, c = x.shape[:2]
        ntaps = int(np.prod(ks))
        if isinstance(xp, np.ndarray) and xp.ndim == 2 + len(ks):
            # every tap at once: one strided copy of [N, C, *kernel, *out] (tap order as itertools.product)
            st = xp.strides
            view = np.lib.stride_tricks.as_strided(
                xp, (n, c) + tuple(ks) + tuple(out),
                st[:2] + tuple(st[2 + i] * dil[i] for i in range(len(ks)))
                + tuple(st[2 + i] * strides[i] for i in range(len(ks))), writeable=False)
            cols = np.ascontiguousarray(view, dtype=dtype).reshape((n, c, ntaps) + tuple(out))
        else:
            cols = np.empty((n, c, ntaps) + tuple(out), dtype=dtype)
            for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
                cols[:, :, t] = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
        wm = gemm_weights(op, w, g, dtype)                         # [g, Mg, Cg*taps]
        p = int(np.prod(out))
        cols = cols.reshape(n, g, (c // g) * ntaps, p)
        y = np.matmul(wm, cols)                                 # [n, g, Mg, p]
        y = y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(out))
        return finish(op, y, b, inputs, x.dtype)
