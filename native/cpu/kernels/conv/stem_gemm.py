"""The stem-gemm-shares tactic: a convolution over few input channels (an image model's stem: resnet18's 7x7 / 2,
3 -> 64), stride 1 or 2, as bands of one GEMM each over patch rows copied as unit-stride runs from the input's phase
planes, the bias and a RELU / HardSwish applied as each band's rows are stored; the two halves of the bands run at
once by the caller and a polling pool worker without the GIL (native/cpu/jit_stem_gemm.py through
threads.kernel_shares), both on the caller where no worker polls.

Why: im2col-gemm gathers resnet18's stem patch matrix ([147, 12544], 7.4 MB) with strided reads, then runs one GEMM
on one core: 1.57 ms at one thread in a run, 1.18 at two; ONNX Runtime's direct kernel takes 0.94 at one.

Numerics: one GEMM per band (OpenBLAS's sums over K = C * kh * kw, in the (c, i, j) order of the kernel), then + bias,
then the activation: im2col's products summed by another call shape, so a tactic of its own, tolerance-tested
against a float64 reference (tests/native/test_kernel_share_tactics.py), the same at any thread count (the band cut
depends on the shapes only). Float32, groups 1, dilation 1, odd square kernels up to MAX_KERNEL, at most
MAX_CHANNELS input channels; other post-ops, a merged shortcut or a residual after it (`finish`). Offered with 2+
threads only (on one, im2col-gemm's single GEMM is ~4% faster).
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.stem_direct import fused_act
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.gemv_shares import output_for
from native.cpu.threads import kernel_shares, num_threads, sgemm_address
from native.tactics import Tactic, register_tactic

GEMM_ACTS = {"RELU": 1, "HARD_SWISH": 2}   # jit_stem_gemm's codes (a SiLU runs after it, in `finish`)
MAX_CHANNELS = 4
MAX_KERNEL = 11
BAND_BYTES = 2 << 20      # a band's patches and product (512 KiB bands ran 1.2x slower: shorter GEMMs)
_DUMMY = np.zeros(1, np.float32)


def kernels():
    """native/cpu/jit_stem_gemm.py where numba and numpy's 64-bit cblas_sgemm are there, else None (jit.offered_module)."""
    return jit.offered_module("jit_stem_gemm", sgemm_address)


def band_rows(k, m, wz):
    """Output rows a band: its patches [K, rows * WZ] and product [M, rows * WZ] in BAND_BYTES."""
    return max(1, BAND_BYTES // (4 * (k + m) * wz))


class _Block:
    """One layer's argument block and its two parts' scratch for one input shape and thread."""

    def __init__(self, kit, wt, bias, act, shape, kernel, stride, pre, out):
        c, h, w = shape[1:]
        m, kk = wt.shape
        kh, kw = kernel
        ho, wo = out
        wz = wo + (kw - 1) // stride
        rows = band_rows(kk, m, wz)
        bands = -(-ho // rows)
        prow = rows + (kh - 1) // stride + 1
        self.keep = [wt, bias]
        arrays = {kit.WT: wt, kit.BIAS: _DUMMY if bias is None else bias}
        for zw, pw_, yw in ((kit.Z0, kit.P0, kit.YB0), (kit.Z1, kit.P1, kit.YB1)):
            bufs = (np.zeros(c * stride * stride * prow * wz + stride * wz, np.float32),
                    np.zeros(kk * rows * wz, np.float32), np.zeros(m * rows * wz, np.float32))
            self.keep += bufs
            arrays[zw], arrays[pw_], arrays[yw] = bufs
        self.args = kit.block({kit.C: c, kit.H: h, kit.W: w, kit.M: m, kit.HO: ho, kit.WO: wo, kit.KH: kh, kit.KW: kw,
                               kit.S: stride, kit.PT: pre[0], kit.PL: pre[1], kit.ACT: act,
                               kit.HAS_BIAS: int(bias is not None), kit.ROWS: rows, kit.HALF: bands // 2,
                               kit.BANDS: bands, kit.WZ: wz, kit.SGEMM: sgemm_address()}, arrays)


@register_tactic
class StemGemmShares(Tactic):
    """A few-channel convolution as banded GEMMs over phase-plane patch rows, two halves as kernel shares."""
    kind, name = "Convolution", "stem-gemm-shares"
    honours = {"post_ops", "side"}
    precisions = ("float32",)
    own_precisions = True
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        if len(ks) != 2 or ks[0] != ks[1] or ks[0] % 2 == 0 or not 1 < ks[0] <= MAX_KERNEL:
            return f"odd square kernels of 3 to {MAX_KERNEL} taps only"
        st = list(p.get("strides") or [1, 1])
        if st not in ([1, 1], [2, 2]) or any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "stride 1 or 2 (both axes), dilation 1 only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        s = input_shapes[0] if input_shapes else None
        if s is None or len(s) != 4 or any(not isinstance(d, int) or d < 1 for d in s) or s[1] > MAX_CHANNELS:
            return f"4-D inputs of known shape and at most {MAX_CHANNELS} channels only"
        if min(list(p.get("pre_padding") or [0, 0]) + list(p.get("post_padding") or [0, 0])) < 0:
            return "no negative padding"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if op.weights.get("kernel") is None and op.weights.get("kernel_stem_gemm") is None:
            return "constant weights only"
        if kernels() is None:
            return "needs the numba extra and numpy's 64-bit-integer cblas_sgemm"
        if num_threads() < 2:
            return "one thread: im2col-gemm's one GEMM is the same work (~4% faster)"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_stem_gemm"] = np.ascontiguousarray(np.asarray(w, np.float32).reshape(w.shape[0], -1))
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        kit = kernels()
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        kernel = tuple(op.params["kernel_shape"])
        wt = op.weights.get("kernel_stem_gemm")
        if wt is None:
            w = np.asarray(op.weights["kernel"], np.float32)
            wt = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        act = fused_act(op, GEMM_ACTS)
        fused = act is not None
        bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None and fused else None
        _, _, pre, _, (ho, wo) = geometry(op.params, x.shape, list(kernel))
        n, m = x.shape[0], wt.shape[0]
        stride = (op.params.get("strides") or [1, 1])[0]
        key = (x.shape, act, bias is None, threading.get_ident())
        cache = op.__dict__.setdefault("_stem_gemm_blocks", {})
        blk = cache.get(key)
        if blk is None or blk.keep[0] is not wt:
            blk = cache[key] = _Block(kit, wt, bias, act if fused else 0, x.shape, kernel, stride, tuple(pre),
                                      (ho, wo))
        if bias is not None:     # (a bias input, not a weight, may move from call to call)
            blk.args[kit.BIAS] = bias.ctypes.data
        dst = output_for(outputs, (n, m, ho, wo), inputs)
        for ni in range(n):
            kernel_shares(kit.stem_gemm_stage.address, blk.args, x, dst, ni, 1)
        if fused:
            return [dst]
        return finish(op, dst, b, inputs, x.dtype)
