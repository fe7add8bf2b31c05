"""The stem-direct-shares tactic: a 3x3 convolution over few input channels (an image model's stem), stride 1 or 2,
as one compiled direct loop cut in two row halves that the caller and a polling pool worker run at once without
the GIL (native/cpu/jit_stem.py through threads.kernel_shares; both halves on the caller where no worker polls).

Why: MobileNetV3-small's stem (3 -> 16, 224x224 -> 112x112, HardSwish) ran as phase-gemm-s2 (four GEMMs of K <= 12,
then a HardSwish pass) in 0.25 ms of a ~1.4 ms run at one thread, on one core at two (too small for a Python
hand-off); ONNX Runtime's direct kernel takes 0.10 ms. Direct, each tap a unit-stride run over a band of rows of
the input's phase planes, the bias and a RELU / HardSwish applied as each band is stored: ~0.15 ms at one thread,
the two halves at once at two. YOLOv8's stem (3 -> 16, 320x320 -> 160x160, SiLU) ends in a SiLU, by polyexp's exp
(the *-polyexp tactics' pass, row by row): with it the builder can pick this tactic there (at two threads ~0.22 ms,
as phase-gemm-s2; stem-gemm-shares, whose SiLU runs after it in numpy, ~0.38).

Numerics: per output, the nine taps of each input channel summed in tap order with fused multiply-adds, the
channels in order, then + bias, then the activation: its own rounding (tolerance-tested against a float64
reference, tests/native/test_kernel_share_tactics.py), the same at any thread count (rows do not depend on each other).
Float32, groups 1, dilation 1, at most MAX_CHANNELS input channels; post-ops other than one RELU / HardSwish / SiLU, a
merged shortcut or a residual run after it (`finish`).
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.gemv_shares import output_for
from native.cpu.threads import kernel_shares, sgemm_address
from native.tactics import Tactic, register_tactic

MAX_CHANNELS = 4
BAND_BYTES = 56 << 10     # a part's [M, band * WZ] accumulators: about L1 with the band's phase rows
_ACTS = {"RELU": 1, "HARD_SWISH": 2, "SILU": 3}
_EMPTY = np.zeros(1, np.float32)


def kernels():
    """native/cpu/jit_stem.py, or None where numba is missing or it does not compile (jit.offered_module)."""
    return jit.offered_module("jit_stem")


def fused_act(op, acts=None):
    """The activation code jit_stem applies after the bias (0 none, 1 RELU, 2 HardSwish, 3 SiLU by polyexp's exp)
    where that is every post-op and there is no merged shortcut, else None (`finish` runs them). `acts`: another
    kernel's codes ({type: code}; stem-gemm-shares has no SiLU)."""
    steps = op.params.get("post_ops") or ()
    if op.params.get("side"):
        return None
    if not steps:
        return 0
    if len(steps) == 1 and steps[0]["op"] == "activation":
        return (_ACTS if acts is None else acts).get(steps[0]["type"])
    return None


class _Block:
    """One layer's argument block and scratch for one input shape and thread (the block holds their addresses)."""

    def __init__(self, k, wt, bias, act, shape, pads, out_hw, stride):
        c, h, w = shape[1:]
        m = wt.shape[0]
        (pt, pl), (ho, wo) = pads, out_hw
        wz = wo + (1 if stride == 2 else 2)
        split = ho // 2
        band = max(1, BAND_BYTES // (4 * m * wz))
        self.keep = [wt, bias]
        words = {k.C: c, k.H: h, k.W: w, k.M: m, k.HO: ho, k.WO: wo, k.S: stride, k.PT: pt, k.PL: pl, k.ACT: act,
                 k.HAS_BIAS: int(bias is not None), k.WZ: wz, k.SPLIT: split, k.ACCN: m * band * wz}
        arrays = {k.WT: wt, k.BIAS: _EMPTY if bias is None else bias}
        for word, acc_word, rows in ((k.Z0, k.ACC0, split), (k.Z1, k.ACC1, ho - split)):
            z = np.zeros(c * stride * stride * (rows + 2 // stride + 1) * wz + stride * wz, np.float32)
            acc = np.zeros(m * band * wz, np.float32)
            self.keep += [z, acc]
            arrays[word], arrays[acc_word] = z, acc
        self.args = k.block(words, arrays)


@register_tactic
class StemDirectShares(Tactic):
    """3x3 convolution over at most MAX_CHANNELS input channels, direct, two row halves as kernel shares."""
    kind, name = "Convolution", "stem-direct-shares"
    honours = {"post_ops", "side"}
    precisions = ("float32",)
    own_precisions = True
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        if list(p.get("kernel_shape") or []) != [3, 3]:
            return "3x3 kernels only"
        st = list(p.get("strides") or [1, 1])
        if st not in ([1, 1], [2, 2]) or any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "stride 1 or 2 (both axes), dilation 1 only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        s = input_shapes[0] if input_shapes else None
        if s is None or len(s) != 4 or not isinstance(s[1], int) or not 0 < s[1] <= MAX_CHANNELS:
            return f"4-D inputs of at most {MAX_CHANNELS} known channels only"
        if min(list(p.get("pre_padding") or [0, 0]) + list(p.get("post_padding") or [0, 0])) < 0:
            return "no negative padding"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if op.weights.get("kernel") is None and op.weights.get("kernel_stem") is None:
            return "constant weights only"
        if kernels() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_stem"] = np.ascontiguousarray(np.asarray(w, np.float32).reshape(w.shape[0], w.shape[1], 9))
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        k = kernels()
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        wt = op.weights.get("kernel_stem")
        if wt is None:
            w = np.asarray(op.weights["kernel"], np.float32)
            wt = np.ascontiguousarray(w.reshape(w.shape[0], w.shape[1], 9))
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        act = fused_act(op)
        fused = act is not None
        bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None and fused else None
        _, _, pre, _, (ho, wo) = geometry(op.params, x.shape, [3, 3])
        n, m = x.shape[0], wt.shape[0]
        stride = (op.params.get("strides") or [1, 1])[0]
        key = (x.shape, threading.get_ident())
        cache = op.__dict__.setdefault("_stem_blocks", {})
        blk = cache.get(key)
        if blk is None or blk.keep[0] is not wt:
            blk = cache[key] = _Block(k, wt, bias, act if fused else 0, x.shape, tuple(pre), (ho, wo), stride)
        if bias is not None:     # (a bias input, not a weight, may move from call to call)
            blk.args[k.BIAS] = bias.ctypes.data
        dst = output_for(outputs, (n, m, ho, wo), inputs)
        for ni in range(n):
            if sgemm_address():
                kernel_shares(k.stem_stage.address, blk.args, x, dst, ni, 1)
            else:     # no GIL-free shares here (numpy's BLAS without the 64-bit symbol): both halves in turn
                blk.args[k.X], blk.args[k.Y] = x[ni].ctypes.data, dst[ni].ctypes.data
                k.run_rows(blk.args, 0)
                k.run_rows(blk.args, 1)
        if fused:
            return [dst]
        return finish(op, dst, b, inputs, x.dtype)
