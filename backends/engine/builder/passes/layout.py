"""Layout pass (seed 004, OneFlow's AutoNhwc): NCHW → NHWC for convolution regions where the device prefers it.

1. Insertion (greedy, in topological order): every NHWC-capable op — a 2-D Convolution with constant weights
   (groups 1), a 2-D MAX/AVERAGE/global Pooling without ceil mode — becomes its NHWC twin (ConvolutionNHWC /
   PoolingNHWC) wrapped in transposes: `<op>_transpose_input_<i>` with perm [0,2,3,1] on each operand to
   transpose (data input and residual-add inputs, never the bias) and `<op>_transpose_output_0` with perm
   [0,3,1,2] on its output. A layout-agnostic op (Activation, ElementWise, Pointwise, Unary) is wrapped too
   when one of its 4-D inputs comes from a [0,3,1,2] transpose, maximising the pairs for step 2; its 4-D
   constant operands are transposed at build time, scalar ones kept.
2. Elimination to fixpoint: a transpose reading a transpose whose perms compose to the identity is removed.
3. Weight transposes are done here, at build time (kernel stored as [KH*KW*C, M]); no run-time cost.

Enabled when `config.prefer_nhwc` is True, or, when that is None, when the device class says
`prefers_nhwc = True`. The CPU default is NCHW (see docs/PERFORMANCE.md for the measurement).
BuilderFlag.DISABLE_LAYOUT turns the pass off. Transpose counts before and after are logged.

Timed (a device that `chooses_by_timing`, CUDA, with `config.prefer_nhwc` None): only the regions whose NHWC plan
times faster than NCHW are converted (passes/layout_timing.py says how they are timed).
"""
from __future__ import annotations

from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.fusion_util import View
from backends.engine.builder.passes.layout_timing import timed_regions
from backends.engine.builder.passes.nhwc import (TO_NCHW, TO_NHWC, convert, count_transposes,  # noqa: F401
                                                 eliminate_pairs, is_transpose)
from backends.engine.builder.timed_choice import chooses_by_timing


def prefers_nhwc(config) -> bool:
    explicit = config.prefer_nhwc
    if explicit is not None:
        return bool(explicit)
    return config.device.prefers_nhwc


def run_layout(graph, config, logger, ctx=None) -> int:
    if "nhwc" not in config.device.formats:     # the device has no channels-last tactics to convert to
        return 0
    timed = ctx is not None and config.prefer_nhwc is None and chooses_by_timing(config)
    if not timed and not prefers_nhwc(config):
        return 0
    before = count_transposes(graph)
    skip, chosen = set(), {}
    if timed:
        decided = timed_regions(graph, config, logger, ctx)
        if decided is None and not prefers_nhwc(config):
            return 0
        if decided is not None:
            skip, chosen = decided
            # INT8 I/O layers (passes/int8_io.py) run only NHWC: their region's timing, in float, does not decide
            skip = skip - {n.name for n in graph.nodes if n.meta.get("int8_io")}
    converted = len(convert(graph, skip))
    for n in graph.nodes:
        if n.name in chosen:
            n.meta["layout_ms"] = chosen[n.name]
    view = View(graph)
    removed = eliminate_pairs(graph, view)
    eliminate_dead_layers(graph, config)
    after = count_transposes(graph)
    logger.info(f"layout: {converted} layers to NHWC; transposes {before} → {after} "
                f"({removed} inverse pairs cancelled)")
    return converted + removed
