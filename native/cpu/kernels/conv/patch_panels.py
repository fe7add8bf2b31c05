"""The patch-gemm-panels tactic: a convolution whose kernel tiles its input (kernel == stride, no padding or
dilation: a ViT's patch embedding, 16x16 stride 16) as one GEMM by matmul_panels' compiled GEMM on the kernel packed
at build time into 32-column panels (the numba extra).

Why: such a layer's patches do not overlap, so its patch matrix [N*Ho*Wo, C*kh*kw] is the input itself reordered (one
copy, runs of kw floats), and the rest is one GEMM. im2col-gemm builds the same matrix and runs OpenBLAS (which re-packs
the weights every call and is single-threaded on the pool); nhwc-gemm-panels gathers channel-last windows out of a
reformatted input, two slow copies with 3 input channels. vit_tiny's [1, 3, 224, 224] -> [1, 192, 14, 14]: patches
43 us + GEMM 243 us + NCHW copy 10 us against im2col-gemm's 419 us on one thread, and the GEMM's panels split over
the CPU pool (`matmul_panels.gemm`).

Numerics: each output a chain of fused multiply-adds over (c, i, j) in order from zero: its own rounding (the panel
GEMM's), tolerance-tested; bias and RELU in the kernel when they are the only post-ops, else the common epilogue.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.panel_gemm import held_panels
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.matmul_panels import gemm, pack_panels
from native.tactics import Tactic, register_tactic


def tiling_refusal(p, input_shapes) -> str | None:
    """Why a convolution's kernel does not tile its input (None: it does)."""
    ks = list(p.get("kernel_shape") or [])
    if len(ks) != 2:
        return "2-D convolutions only"
    if list(p.get("strides") or [1, 1]) != ks or ks == [1, 1]:
        return "kernel == stride (larger than 1x1) only: non-overlapping patches"
    if any(d != 1 for d in (p.get("dilations") or [1, 1])):
        return "no dilation"
    if any(p.get("pre_padding") or [0]) or any(p.get("post_padding") or [0]) or p.get("auto_pad") \
            not in (None, "NOTSET", "VALID"):
        return "no padding"
    if (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
        return "ungrouped float convolutions without a merged shortcut only"
    if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
        return "2-D convolutions only"
    return None


def patches(x, kh, kw):
    """x [N, C, H, W] -> [N*Ho*Wo, C*kh*kw] float32, Ho = H // kh, Wo = W // kw (the rest cropped): one copy."""
    n, c, h, w = x.shape
    ho, wo = h // kh, w // kw
    t = x[:, :, :ho * kh, :wo * kw].reshape(n, c, ho, kh, wo, kw).transpose(0, 2, 4, 1, 3, 5)
    out = np.empty((n * ho * wo, c * kh * kw), np.float32)
    out.reshape(t.shape)[...] = t
    return out


@register_tactic
class PatchGemmPanels(Tactic):
    """Non-overlapping patches x the panel-packed kernel by the compiled panel GEMM (see the module docstring)."""
    kind, name = "Convolution", "patch-gemm-panels"
    honours = {"post_ops"}
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = tiling_refusal(op.params, input_shapes)
        if why:
            return why
        if "kernel" not in op.weights and "kernel_panels" not in op.weights:
            return "constant kernels only (packed at build time)"
        return jit.float32_refusal(input_shapes)

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:   # already packed (idempotent)
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        w = np.asarray(w, np.float32)
        weights["kernel_panels"] = pack_panels(np.ascontiguousarray(w.reshape(w.shape[0], -1).T))
        weights["kernel_columns"] = np.array(w.shape[0], np.int64)
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        bp, m, bias, fused, fn, rows, describe = held_panels(self, op, "_patch_panels")
        x = np.asarray(inputs[0]).astype(np.float32, copy=False)
        kh, kw = op.params["kernel_shape"]
        n = x.shape[0]
        ho, wo = geometry(op.params, x.shape, [kh, kw])[4]
        cols = patches(x, kh, kw)
        assert cols.shape[0] == n * ho * wo
        y = np.empty((n * ho * wo, m), np.float32)
        gemm(cols, bp, bias, fused is not None, fused or 0, y, fn, rows, describe)
        shape = (n, m, ho, wo)
        dst = outputs[0] if outputs else None
        yc = dst if dst is not None and dst.shape == shape and dst.dtype == np.float32 and dst.flags.c_contiguous \
            else np.empty(shape, np.float32)
        yc.reshape(n, m, ho * wo)[...] = y.reshape(n, ho * wo, m).transpose(0, 2, 1)   # NHWC -> NCHW
        if fused is not None:                                                           # bias, RELU done
            return [yc]
        return finish(op, yc, conv_bias(op.weights), inputs, np.float32)
