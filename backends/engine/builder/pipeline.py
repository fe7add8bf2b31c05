"""The builder's pass order, as a list. Each entry is `Pass(name, f(graph, ctx) -> PassResult, when)`; the pass
manager (pass_manager.py) runs them with their instruments. To add a pass, write `f(graph, ctx)` and put it in
PIPELINE where it belongs; nothing else in the builder changes.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.feeds import timing_feeds
from backends.engine.builder.pass_manager import Pass, PassResult
from backends.engine.builder.passes import int8 as int8_pass
from backends.engine.builder.passes import int8_io
from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.dla import apply_dla, network_ranges
from backends.engine.builder.passes.fold import (absorb_constant_operands, absorb_constant_weights,
                                                 constants_into_bodies, fold_constants)
from backends.engine.builder.passes.fusion import PASSES, run_fusions
from backends.engine.builder.passes.inline_if import inline_constant_ifs
from backends.engine.builder.passes.layout import run_layout
from backends.engine.builder.passes.precision import assign_precision
from backends.engine.builder.passes.shape_fold import fixed_input_shapes, fold_shapes
from backends.engine.builder.tactic_selection import select_tactics
from backends.engine.calibration.collect import calibrate
from backends.engine.engine_graph import TensorInfo, node_format
from backends.engine.memory_plan import plan_memory, tensor_bytes
from backends.engine.runtime.executor import GraphExecutor
from native.errors import BuildError


def _on(flag):
    return lambda config: not config.get_flag(flag)


# --- graph rewrites -------------------------------------------------------------------------------------------

def constant_folding(graph, ctx):
    """Fold constants (inside If / Loop / Scan bodies too, with the enclosing constants they read); an If whose
    condition became a constant runs its branch inline (passes/inline_if.py), which may fold further."""
    n = constants_into_bodies(graph)
    n += fold_constants(graph, ctx.config, ctx.reference_device)
    while True:
        inlined = inline_constant_ifs(graph, ctx.logger)
        if not inlined:
            return PassResult(n)
        n += inlined + fold_constants(graph, ctx.config, ctx.reference_device)


def dead_layers(graph, ctx):
    return PassResult(eliminate_dead_layers(graph, ctx.config))


def shape_folding(graph, ctx):
    """Fixed input shapes: Shape layers and the shape arithmetic behind them become constants."""
    if fixed_input_shapes(graph, ctx.config) is None:
        return PassResult(0, "input shapes not fixed")
    feeds = opt_feeds(graph, ctx)
    network = ctx.state.get("network")   # memo on the network: a rebuild of the same model runs the graph once
    memo = network.__dict__.setdefault("_observed_shapes", {}) if network is not None else None
    return PassResult(fold_shapes(graph, ctx.config, feeds, ctx.reference_device, ctx.logger, memo=memo))


def weight_absorption(graph, ctx):
    n = absorb_constant_weights(graph, ctx.config) + absorb_constant_operands(graph, ctx.config)
    if n:
        eliminate_dead_layers(graph, ctx.config)
    return PassResult(n)


def fusion_pass(label, fn):
    def run(graph, ctx):
        n = fn(graph, ctx.config, ctx.logger)
        if n:
            ctx.state.setdefault("fusions", []).append((label, n))
        return PassResult(n)
    run.__name__ = f"fusion_{label}"
    return run


def fusion_finish(graph, ctx):
    """Dead layers the fusions left, fusion inside If / Loop / Scan bodies, and the summary line."""
    total = eliminate_dead_layers(graph, ctx.config)
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            total += run_fusions(sub, ctx.config, ctx.logger)
    done = ctx.state.pop("fusions", [])
    total += sum(n for _, n in done)
    if done:
        before = ctx.state.get("layers_before_fusion", len(graph.nodes))
        ctx.logger.info(f"fusion: {total} rewrites, {before} → {len(graph.nodes)} layers "
                        f"({'; '.join(f'{label}: {n}' for label, n in done)})")
    return PassResult(total)


def fusion_start(graph, ctx):
    ctx.state["layers_before_fusion"] = len(graph.nodes)
    return PassResult(0)


def int8_calibration_before_fusion(graph, ctx):
    """INT8 without Q/DQ: entropy2 / minmax calibrators see the network as parsed."""
    if int8_pass.has_qdq(graph):
        return PassResult(0, "explicit Q/DQ: no calibration")
    ctx.state["calibrated"] = calibrate(graph, ctx.config, ctx.logger, "before_fusion")
    return PassResult(0)


def int8_assignment(graph, ctx):
    """Which layers run in INT8, with which scales (entropy / percentile calibrators see the fused network)."""
    calibrated = ctx.state.get("calibrated")
    if calibrated is None and not int8_pass.has_qdq(graph):
        calibrated = calibrate(graph, ctx.config, ctx.logger, "after_fusion")
    return PassResult(int8_pass.assign_int8(graph, ctx.config, ctx.logger, calibrated,
                                            ctx.state["network"].dynamic_ranges(), ctx=ctx) or 0)


def layout(graph, ctx):
    return PassResult(run_layout(graph, ctx.config, ctx.logger, ctx))


def precision(graph, ctx):
    """Per-layer compute precision (passes/precision.py); tactic selection then holds it to what tactics offer."""
    return PassResult(assign_precision(graph, ctx.config, ctx.logger, ctx) or 0)


def int8_storage(graph, ctx):
    """int8 tensors between the INT8 layers that read and write them, Reformat layers at the edges
    (passes/int8_io.py)."""
    return PassResult(int8_io.apply(graph, ctx.config, ctx.logger))


# --- analyses the tactic choice needs -------------------------------------------------------------------------

opt_feeds = timing_feeds   # (the passes' name for it)


def timing_run(graph, ctx):
    """Run the graph once at the opt shapes on the target device with the interpreter: every tensor's value
    feeds tactic timing, and its dtype / shape / format become the edge's TensorInfo."""
    feeds = opt_feeds(graph, ctx)      # a missing profile is the user's error: raised, not swallowed
    env = None
    try:
        executor = GraphExecutor(graph, ctx.device, keep_all=True, record_bodies=True)
        env = executor.run(feeds)
        ctx.state["body_envs"] = executor.body_envs()   # If / Loop bodies' layers are timed on these values
    except Exception as e:
        ctx.logger.warning(f"timing run at opt shapes failed ({str(e)[:300]}); tactics are chosen without timing "
                           f"for layers after the failure. Pass representative inputs as timing feeds to fix it")
    ctx.state["env"] = env
    if env is None:
        return PassResult(0, "failed")
    fmt = {o: node_format(n) for n in graph.nodes for o in n.outputs}
    for name, v in env.items():
        if isinstance(v, np.ndarray):
            old = graph.tensor_info.get(name)
            info = TensorInfo(name, v.dtype.name, list(v.shape), dict(old.dim_names) if old else {},
                              old.kind if old else "tensor", fmt.get(name, "linear"))
            if old is not None:
                info.dynamic_range, info.scale = old.dynamic_range, old.scale
            graph.tensor_info[name] = info
    for node in graph.nodes:
        node.meta["input_shapes"] = [list(np.shape(env[i])) if isinstance(env.get(i), np.ndarray) else None
                                     for i in node.inputs if i is not None]
        node.meta["output_shapes"] = [list(np.shape(env[o])) if o in env and isinstance(env[o], np.ndarray)
                                      else None for o in node.outputs]
        node.meta["output_dtypes"] = [env[o].dtype.name if o in env and isinstance(env[o], np.ndarray)
                                      else None for o in node.outputs]
    return PassResult(0)


def dla_placement(graph, ctx):
    """DLA builds: which layers the DLA takes (its constraints need every tensor's static shape)."""
    env = ctx.state.get("env")
    if env is None:
        raise BuildError("a DLA build needs every tensor's static shape, but the timing run failed (see above)")
    network = ctx.state["network"]
    shapes = {k: list(np.shape(v)) for k, v in env.items() if isinstance(v, np.ndarray)}
    ranges = network_ranges(network)
    if ctx.config.get_flag(BuilderFlag.INT8):   # calibrated scales too: one calibration serves DLA and host layers
        scales = int8_pass.implicit_scales(graph, ctx.state.get("calibrated"), network.dynamic_ranges())
        ranges = {**{t: (-127.0 * s, 127.0 * s) for t, s in scales.items()}, **ranges}
    plan = apply_dla(graph, ctx.config, shapes, ranges, network, ctx.logger)
    return PassResult(len(getattr(plan, "loadables", None) or ()))


def tactic_selection(graph, ctx):
    select_tactics(graph, ctx.state.get("env"), ctx.config, ctx.device, cache=ctx.state.get("timing_cache"),
                   body_envs=ctx.state.pop("body_envs", None))
    return PassResult(0)


def memory_plan(graph, ctx):
    env = ctx.state.pop("env", None)
    if env is None:
        return PassResult(0, "no timing run: no sizes")
    mem = plan_memory(graph, {k: tensor_bytes(v) for k, v in env.items()})
    ctx.state["memory"] = mem
    ctx.logger.info(f"memory plan: {mem['arena_bytes'] / 2**20:.1f} MiB arena for intermediates "
                    f"(unshared: {mem['naive_bytes'] / 2**20:.1f} MiB)")
    return PassResult(0)


def _fusions():
    on = _on(BuilderFlag.DISABLE_FUSION)
    return [Pass("fusion", fusion_start, on)] + \
        [Pass(f"fusion: {label}", fusion_pass(label, fn), on) for label, fn in PASSES] + \
        [Pass("fusion: dead layers and subgraph bodies", fusion_finish, on)]


def pipeline():
    """The builder's passes in order."""
    folding = _on(BuilderFlag.DISABLE_CONSTANT_FOLDING)
    int8 = lambda c: c.get_flag(BuilderFlag.INT8)   # noqa: E731
    return [
        Pass("constant folding", constant_folding, folding),
        Pass("dead-layer elimination", dead_layers),
        Pass("shape folding", shape_folding, folding),
        Pass("weight absorption", weight_absorption),
        Pass("INT8 calibration (before fusion)", int8_calibration_before_fusion, int8),
        *_fusions(),
        Pass("INT8 assignment", int8_assignment, int8),
        Pass("layout", layout, lambda c: not c.get_flag(BuilderFlag.DISABLE_LAYOUT) and not c.uses_dla()),
        Pass("precision", precision),
        Pass("INT8 I/O", int8_storage, int8),
        Pass("timing run", timing_run),
        Pass("DLA placement", dla_placement, lambda c: c.uses_dla()),
        Pass("tactic selection", tactic_selection),
        Pass("memory plan", memory_plan),
    ]
