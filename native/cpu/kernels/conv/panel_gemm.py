"""The nhwc-gemm-panels tactic: nhwc-gemm's channel-last GEMM run by matmul_panels' compiled GEMM on the kernel
packed at build time into 32-column panels (the numba extra).

Why: the convolutions' GEMMs were OpenBLAS's (100-115 GMAC/s on a Zen 5 core unpinned, far less where its core type
is pinned to Haswell: AVX2 kernels), and OpenBLAS re-packs the weights on every call (resnet18's layer4: 9.4 MB a
run). This GEMM packs nothing at run time and is compiled for the host CPU whatever OpenBLAS picks (h71: 93-123
GMAC/s on one core). The patch matrix is channel-last ([N*Ho*Wo, kh*kw*C]: for a 1x1 stride-1 layer the reformatted
input itself, no gather), the weights [kh*kw*C, M] as `pack_panels` panels, the [N*Ho*Wo, M] product reformatted
back to NCHW; bias, side term and post-ops by the common epilogue (`finish`). `matmul_panels.gemm` splits the
panels over the CPU pool for large products (the floats do not depend on the split).

Numerics: each output a chain of fused multiply-adds over (kh, kw, C) in order from zero: other rounding than the
BLAS tactics (same error bound), so it is a tactic the builder times against them, tested by tolerance.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.nhwc_gemm import hwio, nhwc_padded, nhwc_windows, patch_workspace
from native.cpu.kernels.conv.pointwise_1x1 import is_pointwise
from native.cpu.kernels.conv.silu_polyexp import _variant
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.matmul_panels import PANEL, gemm, kernels, pack_panels
from native.cpu.threads import num_threads
from native.tactics import Tactic, register_tactic


def panels(w):
    """[M, C, kh, kw] -> the channel-last GEMM weights [kh*kw*C, M] packed into panels [ceil(M / 32), kh*kw*C, 32]."""
    return pack_panels(hwio(np.asarray(w, np.float32)))


def in_kernel(op):
    """The kernel's activation code (0 none, 1 RELU) when the bias and post-ops are [bias,] [RELU] alone and there
    is no side term: the panel kernel adds the bias (per output channel: per column here) and applies RELU on each
    block while it is in cache, one pass less over the output; else None (the common epilogue, `finish`)."""
    steps = op.params.get("post_ops") or ()
    if op.params.get("side") or len(steps) > 1:
        return None
    if not steps:
        return 0
    st = steps[0]
    return 1 if st["op"] == "activation" and st["type"] == "RELU" else None


def held_panels(tactic, op, key: str):
    """(packed kernel panels, output channels, bias padded to whole panels (zeros unless the post-ops run in the
    kernel), the in-kernel post-op code or None, then matmul_panels.kernels' three) of a panel-GEMM convolution,
    worked out once per op and weights (kept on the op under `key`); `tactic.prepare` packs raw weights."""
    cfg = op.__dict__.get(key)
    if cfg is None or cfg[0] is not op.weights:
        w = tactic.prepare(op)   # packed already, or (the builder's first run on the raw weights) now
        bp = w["kernel_panels"]
        m = int(w["kernel_columns"])
        fused = in_kernel(op)
        bias = np.zeros(bp.shape[0] * PANEL, np.float32)
        b = conv_bias(op.weights)
        if fused is not None and b is not None:
            bias[:m] = np.asarray(b, np.float32).reshape(-1)
        cfg = op.__dict__[key] = (op.weights, bp, m, bias, fused) + kernels(fused or 0)
    return cfg[1:]


@register_tactic
class NhwcGemmPanels(Tactic):
    """Channel-last patches x the panel-packed kernel by the compiled panel GEMM (see the module docstring)."""
    kind, name = "Convolution", "nhwc-gemm-panels"
    honours = {"post_ops", "side"}
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        p = op.params
        if len(list(p.get("kernel_shape") or [])) != 2:
            return "2-D convolutions only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        if "kernel" not in op.weights and "kernel_panels" not in op.weights:
            return "constant kernels only (packed at build time)"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return jit.float32_refusal(input_shapes)

    def workspace_size(self, op, input_shapes):
        return patch_workspace(op, input_shapes)      # nhwc-gemm's patches

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:   # already packed (idempotent)
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_panels"] = panels(w)
        weights["kernel_columns"] = np.array(np.shape(w)[0], np.int64)
        return weights

    def run(self, op, inputs):
        bp, m, bias, fused, fn, rows, describe = held_panels(self, op, "_conv_panels")
        x = np.asarray(inputs[0])
        x = x.astype(np.float32, copy=False)
        n, c = x.shape[:2]
        ks = list(op.params.get("kernel_shape"))
        taps = ks[0] * ks[1]
        assert bp.shape[1] == taps * c
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        ho, wo = out
        xh = nhwc_padded(x, pre, post, num_threads())           # NCHW -> padded NHWC, one copy
        if taps == 1 and tuple(strides) == (1, 1) and xh.shape[1:3] == (ho, wo):
            cols = xh.reshape(n * ho * wo, c)                      # a 1x1 stride-1 layer: the input is the patches
        else:
            win = nhwc_windows(xh, ks, strides, dil, out)          # [N, Ho, Wo, kh, kw, C], a view
            cols = np.empty((n * ho * wo, taps * c), np.float32)
            cols.reshape(win.shape)[...] = win
        y = np.empty((n * ho * wo, m), np.float32)
        gemm(cols, bp, bias, fused is not None, fused or 0, y, fn, rows, describe)
        yc = np.empty((n, m, ho * wo), np.float32)                 # NHWC -> NCHW for the neighbours
        yc[...] = y.reshape(n, ho * wo, m).transpose(0, 2, 1)
        if fused is not None:                                      # bias and RELU done in the kernel
            return [yc.reshape(n, m, ho, wo)]
        return finish(op, yc.reshape(n, m, ho, wo), conv_bias(op.weights), inputs, np.float32)


def input_panels(x2):
    """x2 [C, HW] (a sample's input) -> [ceil(HW / 32), C, 32] float32 panels, zero past HW: one copy in runs of 32
    floats (the weights-left orientation packs the input, not the weights)."""
    c, hw = x2.shape
    whole = hw // PANEL
    p = -(-hw // PANEL)
    out = np.empty((p, c, PANEL), np.float32)
    out[:whole] = x2[:, :whole * PANEL].reshape(c, whole, PANEL).transpose(1, 0, 2)
    if p > whole:
        out[whole] = 0
        out[whole, :, :hw - whole * PANEL] = x2[:, whole * PANEL:]
    return out


@register_tactic
class PointwisePanels(Tactic):
    """1x1 convolution as y[n] [M, H*W] = W [M, C] @ x[n] [C, H*W] by the compiled panel GEMM, the input packed
    into 32-pixel panels per call (one copy in runs of 32 floats) and the output written NCHW in place: no
    reformat, as 1x1-gemm, and no BLAS (whose pinned AVX2 kernels, and re-packing, the panels avoid)."""
    kind, name = "Convolution", "1x1-gemm-panels"
    honours = {"post_ops", "side"}
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        if not is_pointwise(op, input_shapes):
            return "pointwise (1x1, unpadded) convolutions only"
        if (op.params.get("groups", 1) or 1) != 1:
            return "ungrouped convolutions only"
        if "kernel" not in op.weights and "kernel_rows" not in op.weights:
            return "constant kernels only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return jit.float32_refusal(input_shapes)

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_rows"] = np.ascontiguousarray(np.asarray(w, np.float32).reshape(np.shape(w)[0], -1))
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        cfg = op.__dict__.get("_1x1_panels")
        if cfg is None or cfg[0] is not op.weights:   # per op, once
            wm = self.prepare(op)["kernel_rows"]
            cfg = op.__dict__["_1x1_panels"] = (op.weights, wm, np.zeros(PANEL, np.float32)) + kernels(0)
        _, wm, zeros, fn, rows, describe = cfg
        x = np.asarray(inputs[0]).astype(np.float32, copy=False)
        strides = op.params.get("strides") or [1, 1]
        if any(s != 1 for s in strides):
            x = x[:, :, ::strides[0], ::strides[1]]
        n, c, h, w = x.shape
        m = wm.shape[0]
        shape = (n, m, h, w)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == np.float32 and dst.flags.c_contiguous \
            else np.empty(shape, np.float32)
        for ni in range(n):
            xp = input_panels(x[ni].reshape(c, h * w))
            if zeros.shape[0] < xp.shape[0] * PANEL:   # the kernel reads a panel's bias whole (unused: no bias)
                zeros = np.zeros(xp.shape[0] * PANEL, np.float32)
                op.__dict__["_1x1_panels"] = cfg[:2] + (zeros,) + cfg[3:]
            gemm(wm, xp, zeros, False, 0, y[ni].reshape(m, h * w), fn, rows, describe)
        return finish(op, y, conv_bias(op.weights), inputs, np.float32)


NhwcGemmPanelsPolyexp = _variant(NhwcGemmPanels)
PointwisePanelsPolyexp = _variant(PointwisePanels)   # with polyexp's SiLU (YOLO's layers), as nhwc-gemm-polyexp
