"""The 1x1-gemm tactic: a pointwise convolution as a direct GEMM on the (strided) input, no column matrix."""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import compiled_steps, finish, region_epilogue, run_compiled_steps, view_as
from native.cpu.kernels.conv.gemm2d import conv2d_gemm, recipe
from native.cpu.kernels.conv.weights import (bias_in_gemm, gemm_scale, gemm_weights, kernel_and_bias, pack_gemm,
                                             side_cin, work_dtype)
from native.cpu.threads import num_threads
from native.tactics import Tactic, register_tactic

_ALL = (slice(None), slice(None))


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
        fast = recipe(op, "_small1x1", x, inputs, _SmallPointwise.make)
        if fast is not None and fast.residual_ok(op, inputs):
            return fast.run(op, x, outputs, inputs)
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


class _SmallPointwise:
    """The single-threaded path `conv2d_gemm` takes for a small stride-1 1x1 convolution (squeeze-excite's
    [N, C, 1, 1] GEMVs, 1x1 convolutions on 7x7-14x14 maps), with what depends only on the packed weights and the
    input shape worked out once: per call one GEMM per sample straight into the output and the same in-place
    epilogue, i.e. the same GEMM operands and the same floats as the banded driver, without its ~40 us of Python
    bookkeeping (which cost squeeze-excite 30-70 us per 15K-MAC layer)."""

    __slots__ = ("shape", "dtype", "wm", "bias", "half", "g", "mg", "cg", "hw", "m", "adds", "steps")

    @classmethod
    def make(cls, op, x, inputs):
        strides = op.params.get("strides") or [1] * (x.ndim - 2)
        if x.ndim != 4 or x.dtype.kind != "f" or x.dtype.itemsize < 4 or any(s != 1 for s in strides) \
                or op.params.get("integer") or op.params.get("side") or side_cin(op):
            return None
        if any(st["op"] == "bias" and st.get("axis", 1) != 1 for st in op.params.get("post_ops") or ()):
            return None
        w, b = kernel_and_bias(op, inputs)
        dtype = work_dtype(op, x)
        if x.dtype != dtype:
            return None
        g = op.params.get("groups", 1) or 1
        biased = bias_in_gemm(op)
        wm = gemm_weights(op, w, g, dtype, raw=True)
        bias = None if (biased or b is None) else np.asarray(b, dtype).reshape(-1)
        if biased:   # as conv2d_gemm's direct path: the bias column goes back to the epilogue
            bias, wm = wm[0, :, -1], wm[..., :-1]
        gg, mg, kdim = wm.shape
        n, c, h, w_ = x.shape
        threads = num_threads()
        if threads > 1 and n * gg * mg * kdim * h * w_ >= tuning.PARALLEL_MIN_MACS:
            return None
        scale = gemm_scale(op)
        half = scale is not None
        if half and b is not None and not biased:
            bias = bias * scale.reshape(())
        r = cls()
        r.shape, r.dtype = x.shape, x.dtype
        r.wm, r.bias, r.half, r.g, r.mg, r.cg, r.hw, r.m = wm, bias, half, gg, mg, c // gg, h * w_, gg * mg
        r.adds = [st["input"] for st in op.params.get("post_ops") or () if st["op"] == "add"]
        # the bias and post-ops as one compiled pass, worked out once (None: region_epilogue's steps)
        r.steps = None if x.dtype not in (np.float32, np.float64) else compiled_steps(
            op.params.get("post_ops") or (), half)
        if r.steps is not None and r.bias is not None:
            r.bias = np.ascontiguousarray(r.bias, x.dtype)
        return r

    def residual_ok(self, op, inputs):
        """A fused residual add of the output's own shape (else conv2d_gemm's non-region epilogue runs)."""
        for i in self.adds:
            r = inputs[i]
            if not isinstance(r, np.ndarray) or r.shape != (self.shape[0], self.m) + self.shape[2:]:
                return False
        return True

    def run(self, op, x, outputs, inputs):
        n, _, h, w = self.shape
        shape = (n, self.m, h, w)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == self.dtype else np.empty(shape, self.dtype)
        xp = np.ascontiguousarray(x)
        g, mg, cg, hw, wm = self.g, self.mg, self.cg, self.hw, self.wm
        for ni in range(n):
            np.matmul(wm, view_as(xp[ni], (g, cg, hw)), out=view_as(y[ni], (g, mg, hw)))
        if self.bias is not None or op.params.get("post_ops"):
            if self.steps is None or not run_compiled_steps(y, self.bias, self.steps, inputs):
                region_epilogue(y, _ALL, op, inputs, self.bias, self.half)
        return [y]
