"""The *-polyexp convolution tactics: im2col-gemm, 1x1-gemm, nhwc-gemm and nhwc-gemm-bands with their SiLU post-op
computed by native/cpu/polyexp.py's exp in one compiled pass (the numba extra), not numpy's tanh.

YOLO's convolutions end in SiLU. numpy's float32 tanh costs ~2.6 ns an element on the 2-core CI machine and the
SiLU epilogue three to four passes (~3.5 ns an element): about 1 ms on yolov8n's first [16, 160, 160] map, ~8 ms
of its ~55 ms single-thread run. The compiled pass (`activations.silu_polyexp_inplace`: v * sigmoid(v), sigmoid by
polyexp's exp in the form without cancellation) costs ~1.2 ns an element (~0.18 ns since 2026-11-29, as interleaved
<16 x float> chains: jit_act._silu_vectors). Its floats are not numpy's tanh (relative
error < 4e-7 against the exact SiLU, as the numpy tactics'), so these are tactics of their own, registered after
their bases: the builder times each against its base and keeps the base on a near tie. Each runs its base's code
on a view of the layer whose SiLU post-op reads "SILU_POLYEXP" (`polyexp_op`): the same GEMM, the same packed
weights (1x1-gemm / im2col-gemm's halved GEMM included: the pass doubles first), the same other post-ops.
"""
from __future__ import annotations

import dataclasses

from native.cpu import jit
from native.cpu.kernels.conv.im2col_gemm import Im2colGemm
from native.cpu.kernels.conv.nhwc_bands import NhwcGemmBands
from native.cpu.kernels.conv.nhwc_gemm import NhwcGemm
from native.cpu.kernels.conv.pointwise_1x1 import PointwiseGemm
from native.tactics import register_tactic


def has_silu(op) -> bool:
    return any(st["op"] == "activation" and st["type"] == "SILU" for st in op.params.get("post_ops") or ())


def polyexp_op(op):
    """op with its SILU post-ops as SILU_POLYEXP (a dataclass copy sharing the weights), made once and kept on op
    (again when prepare replaced op.weights or the params changed)."""
    held = op.__dict__.get("_silu_polyexp")
    if held is not None and held[0] is op.params and held[1] is op.weights:
        return held[2]
    post = [dict(st, type="SILU_POLYEXP") if st["op"] == "activation" and st["type"] == "SILU" else st
            for st in op.params.get("post_ops") or ()]
    derived = dataclasses.replace(op, params=dict(op.params, post_ops=post))
    op.__dict__["_silu_polyexp"] = (op.params, op.weights, derived)
    return derived


def _variant(base):
    class SiluPolyexp(base):
        __doc__ = f"{base.name} with polyexp's SiLU (see native/cpu/kernels/conv/silu_polyexp.py)."
        name = f"{base.name}-polyexp"

        def supports(self, op, input_shapes):
            if not has_silu(op):
                return f"no SiLU post-op ({base.name} is the same work)"
            if op.precision != "float32" or op.math:
                return "float32 convolutions only"
            return jit.float32_refusal(input_shapes) or base.supports(self, op, input_shapes)

    short = getattr(base, "_short_run", None)
    if short is not None:   # a base in the short style run(op, inputs): the same (the device calls it directly)
        def run(self, op, inputs):
            return short(self, polyexp_op(op), inputs)
    else:
        def run(self, op, inputs, outputs=None, workspace=None, stream=None):
            return base.run(self, polyexp_op(op), inputs, outputs, workspace, stream)
    SiluPolyexp.run = run
    SiluPolyexp.__name__ = SiluPolyexp.__qualname__ = base.__name__ + "Polyexp"
    return register_tactic(SiluPolyexp)


Im2colGemmPolyexp = _variant(Im2colGemm)
PointwiseGemmPolyexp = _variant(PointwiseGemm)
NhwcGemmPolyexp = _variant(NhwcGemm)
NhwcGemmBandsPolyexp = _variant(NhwcGemmBands)
