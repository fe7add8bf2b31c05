"""The phase-direct-s2 tactic: a 3x3 stride-2 convolution as a register-blocked direct kernel over its input's phase
planes (the numba extra; kernels in native/cpu/jit_phase_direct.py, argument blocks in jit_phase_direct_share.py).

Why: phase-gemm-s2 (phase_gemm.py) runs a band as four BLAS GEMMs of K = 4C, 2C, 2C, C; on yolov8n's stride-2
layers (C 16-128) each re-reads and re-writes the band's product and OpenBLAS packs both operands per call: 62-103
GMAC/s on one Zen 5 core. Here the same phase planes feed a compiled kernel that keeps 8 output channels x 32
pixels in registers over all 9C taps, its weights packed once at build time (direct_panels.pack's blocks): 74-108
GMAC/s on the same shapes (docs/PERFORMANCE.md, h86). Bias and a lone RELU / SiLU (polyexp's exp, the *-polyexp
tactics' floats) are applied as the output rows are written; any other post-ops run after it (`finish`).

Bands of output rows are cut from the shapes only (phase_gemm.band_cut); on the CPU pool an image's bands go in two
halves as kernel shares (threads.kernel_shares, without the GIL). Numerics: each output a chain of fused
multiply-adds over (c, i, j) in order from zero, then + bias, then the activation: its own rounding
(tolerance-tested against a float64 reference), the same floats at any thread count or band cut.
Float32, groups 1, dilation 1, constant kernels.
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import direct_panels, phase_gemm, tuning
from native.cpu.kernels.conv.direct_panels import BLOCK, pack
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.conv.winograd import fused_epilogue
from native.cpu.threads import kernel_shares, num_threads, sgemm_address
from native.tactics import Tactic, register_tactic

NR = 32            # pixels a panel (jit_panel_gemm.NR)
_EMPTY = np.empty(0, np.float32)
_ONE = np.zeros(1, np.float32)     # the bias word's target where there is none (never read)


def _kit():
    """native/cpu/jit_phase_direct_share.py where numba is (jit.offered_module), else None."""
    return jit.offered_module("jit_phase_direct_share")


def offsets(c, stride, bw):
    """Tap q = (c, i, j)'s offset in the band's phase planes (jit_phase_direct's docstring), uint64 [9C]."""
    group = {rs: g for g, rs in enumerate(phase_gemm.PHASES)}
    ci, i, j = np.meshgrid(np.arange(c), np.arange(3), np.arange(3), indexing="ij")
    g = np.vectorize(lambda r, s: group[(int(r), int(s))])(i % 2, j % 2)
    return ((g * c + ci) * stride + (i // 2) * bw + j // 2).reshape(-1).astype(np.uint64)


def unpack(weights):
    """The kernel [M, C, kh, kw] float32 from `prepare`'s weights (raw weights: their kernel)."""
    return direct_panels.unpack(weights, "kernel_direct")


def padded_offsets(c, kh, kw, stride, bw):
    """Tap q = (c, i, j)'s offset in a band of the zero-padded input (stride 1: c * L + i * bw + j), uint64."""
    ci, i, j = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    return (ci * stride + i * bw + j).reshape(-1).astype(np.uint64)


def band_geometry(c, kernel, out, rows):
    """(z rows, z row stride L, wide row width B, tap offsets, yw columns) of a band of `rows` output rows: the
    phase planes for stride 2 (kernel None), the zero-padded input's rows for a stride-1 kh x kw kernel. L leaves
    NR floats past the band, so the last panel's runs stay inside their row."""
    wo = out[1]
    if kernel is None:
        bw = wo + 1
        stride = (rows + 1) * bw + NR
        offs, zrows = offsets(c, stride, bw), 4 * c
    else:
        kh, kw = kernel
        bw = wo + kw - 1
        stride = (rows + kh - 1) * bw + NR
        offs, zrows = padded_offsets(c, kh, kw, stride, bw), c
    return zrows, stride, bw, offs, -(-(rows * bw) // NR) * NR


class _Layer:
    """A layer's argument block and the arrays it points at, for one input shape, epilogue and thread."""

    def __init__(self, kit, shape, blocks, bias, m, act, pre, out, rows, kernel=None):
        c, h, w = shape[1:]
        ho, wo = out
        nb = -(-ho // rows)
        zrows, stride, _, offs, q = band_geometry(c, kernel, out, rows)
        self.keep = [blocks, bias, offs]
        arrays = {kit.WB: blocks, kit.OFFS: offs, kit.BIAS: bias if bias.shape[0] else _ONE}
        for zw, yww in ((kit.Z0, kit.YW0), (kit.Z1, kit.YW1)):
            z, yw = np.zeros((zrows, stride), np.float32), np.zeros((blocks.shape[0] * BLOCK, q), np.float32)
            self.keep += [z, yw]
            arrays[zw], arrays[yww] = z, yw
        kh, kw = kernel or (0, 0)
        self.args = kit.block({kit.C: c, kit.H: h, kit.W: w, kit.M: m, kit.MB: blocks.shape[0], kit.HO: ho,
                               kit.WO: wo, kit.NB: bias.shape[0], kit.ACT: act, kit.PH: pre[0], kit.PW: pre[1],
                               kit.ROWS: rows, kit.HALF: nb // 2, kit.BANDS: nb, kit.L: stride, kit.Q: q,
                               kit.BY_CHANNELS: int(nb < 2), kit.SPLIT: (blocks.shape[0] // 2) * BLOCK,
                               kit.K: offs.shape[0], kit.ZROWS: zrows, kit.KH: kh, kit.KW: kw}, arrays)


@register_tactic
class PhaseDirectS2(Tactic):
    """3x3 stride-2 convolution: a direct kernel over the phase planes of bands of rows (see the module docstring)."""
    kind, name = "Convolution", "phase-direct-s2"
    honours = {"post_ops"}
    precisions = ("float32",)
    own_precisions = True

    def supports(self, op, input_shapes):
        why = phase_gemm.PhaseGemmS2.supports(self, op, input_shapes)
        if why is not None and not why.startswith("needs the numba"):
            return why
        if op.params.get("side"):
            return "no merged shortcut"
        if "kernel" not in op.weights and "kernel_direct" not in op.weights:
            return "constant kernels only (packed at build time)"
        if _kit() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        return 2 * tuning.PHASE_GEMM_BYTES

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:   # already packed (idempotent)
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_direct"] = pack(w, None)[0]
        weights["kernel_shape4"] = np.array(np.shape(w), np.int64)
        return weights

    def run(self, op, inputs):
        kit = _kit()
        if kit is None:
            return direct_panels.run_unpacked(op, inputs, "kernel_direct")
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        n, c = x.shape[:2]
        m = int(np.shape(op.weights["kernel"])[0]) if "kernel" in op.weights else int(op.weights["kernel_shape4"][0])
        b = conv_bias(op.weights)
        _, _, pre, _, (ho, wo) = geometry(op.params, x.shape, list(self._kernel(op) or (3, 3)))
        act, res_i, fused = fused_epilogue(op)
        if res_i is not None or (b is None and len(inputs) > 2 and inputs[2] is not None):
            act, fused = 0, False  # a residual add or a bias input: the common epilogue after the kernel
            if b is None:
                b = inputs[2]
        big = n * m * 9 * c * ho * wo >= tuning.PARALLEL_MIN_MACS
        rows = self._rows(op, c, m, ho, wo, big and n % 2 == 1)
        lay = self._layer(op, kit, x.shape, act, fused, pre, (ho, wo), rows)
        y = np.empty((n, m, ho, wo), np.float32)
        shares = big and num_threads() > 1 and (ho > rows or m > BLOCK) and bool(sgemm_address())
        for ni in range(n):
            if shares:
                kernel_shares(kit.direct_stage.address, lay.args, x, y, ni, 1)
            else:
                kit.image(lay.args, x[ni], y[ni])
        if fused:
            return [y]
        return finish(op, y, b, inputs, x.dtype)

    @staticmethod
    def _kernel(op):
        """(kh, kw) of the stride-1 padded path; None: stride 2's phase planes."""
        return None

    @staticmethod
    def _rows(op, c, m, ho, wo, even):
        """Output rows a band: phase-gemm-s2's cut (the planes and product in tuning.PHASE_GEMM_BYTES)."""
        return phase_gemm.band_cut(ho, wo + 1, phase_gemm.band_rows(c, m, wo), even)

    def _layer(self, op, kit, shape, act, fused, pre, out, rows):
        """The layer's _Layer for this input shape, epilogue and thread, made once (held with op.weights)."""
        key = (shape, act, fused, rows, threading.get_ident())
        cache = op.__dict__.setdefault("_phase_direct_layers", {})
        got = cache.get(key)
        if got is not None and got[1] is op.weights:
            return got[0]
        wts = self.prepare(op)
        b = conv_bias(op.weights)
        bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None and fused else _EMPTY
        if len(cache) >= 64:     # shapes that vary from run to run: keep the recent ones
            cache.clear()
        lay = _Layer(kit, shape, wts["kernel_direct"], bias, int(wts["kernel_shape4"][0]), act, pre, out, rows,
                     self._kernel(op))
        cache[key] = (lay, op.weights)
        return lay
