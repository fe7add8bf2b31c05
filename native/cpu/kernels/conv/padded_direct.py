"""The padded-direct-s1 tactic: a 3x3 stride-1 convolution by phase-direct-s2's register-blocked kernel over bands of
the zero-padded input (the numba extra; jit_phase_direct.padded_direct_band, argument blocks in
jit_phase_direct_share.py).

Why: direct-panels (direct_panels.py) reads the NCHW input in place and handles the padding as lane masks, worked
out for every 32-pixel panel (kh * kw * 32 lanes) and applied to every load. Here a band of input rows is copied
once into a zero-padded buffer (output rows as wide as the padded input's, Wo + kw - 1: two columns more per row,
cropped on the way out), so every tap of a panel is a plain run of floats at a fixed offset. yolov8n's 16->16 3x3
at 80x80 (model.2's bottleneck): 5-15% under direct-panels at one thread; within a few % at 40x40 and below, where
the builder's timing picks (docs/PERFORMANCE.md, h86).

Numerics: each output a chain of fused multiply-adds over (c, i, j) in order from zero (direct-panels' order), then
+ bias, then a lone RELU / SiLU (polyexp's exp; other post-ops after it): tolerance-tested, the same floats at any
thread count or band cut. Float32, groups 1, stride and dilation 1, constant kernels.
"""
from __future__ import annotations

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.phase_direct import PhaseDirectS2, _kit
from native.cpu.kernels.conv.phase_gemm import band_cut
from native.tactics import register_tactic


def shape_refusal(p, input_shapes) -> str | None:
    """Why this convolution is not one the tactic takes (None: it is)."""
    if list(p.get("kernel_shape") or []) != [3, 3]:
        return "3x3 kernels only"
    if list(p.get("strides") or [1, 1]) != [1, 1] or any(d != 1 for d in (p.get("dilations") or [1, 1])):
        return "stride 1, dilation 1 only"
    if (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
        return "ungrouped float convolutions without a merged shortcut only"
    if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
        return "2-D convolutions only"
    if min(list(p.get("pre_padding") or [0, 0]) + list(p.get("post_padding") or [0, 0])) < 0:
        return "no negative padding"
    dtypes = getattr(input_shapes, "dtypes", None)
    if dtypes and dtypes[0] not in (None, "float32"):
        return "float32 inputs only"
    return None


@register_tactic
class PaddedDirectS1(PhaseDirectS2):
    """3x3 stride-1 convolution: the direct kernel over bands of the zero-padded input (see the module docstring)."""
    name = "padded-direct-s1"

    def supports(self, op, input_shapes):
        why = shape_refusal(op.params, input_shapes)
        if why:
            return why
        if "kernel" not in op.weights and "kernel_direct" not in op.weights:
            return "constant kernels only (packed at build time)"
        if _kit() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    @staticmethod
    def _kernel(op):
        return tuple(op.params["kernel_shape"])

    @staticmethod
    def _rows(op, c, m, ho, wo, even):
        """Output rows a band: its padded input rows [C, rows + 2, Wo + 2] and product [M, rows (Wo + 2)] in
        tuning.PHASE_GEMM_BYTES."""
        bw = wo + 2
        most = max(1, (tuning.PHASE_GEMM_BYTES - 8 * c * bw) // (4 * (c + m) * bw))
        return band_cut(ho, bw, most, even)
