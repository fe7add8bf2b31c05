"""Builder: lower, then the pass pipeline (builder/pipeline.py: fold → fuse → layout → precision → timing run →
tactic selection → memory plan) under the pass manager, then plan bytes."""
from __future__ import annotations

import json
import time

import numpy as np

from backends.engine.builder.config import BuilderConfig, BuilderFlag, OptimizationProfile  # noqa: F401
from backends.engine.builder.feeds import opt_feeds  # noqa: F401  (its callers import it from here too)
from backends.engine.builder.graph_copy import copy_graph
from backends.engine.builder.lower import lower
from backends.engine.builder.pass_manager import PassContext, PassManager, default_instruments
from backends.engine.builder.pipeline import pipeline
from backends.engine.network import NetworkDefinition
from backends.engine.plan import serialize_plan
from backends.engine.runtime import Runtime
from native.config import tune_process_default
from native.dla.profiles import MAX_BATCH, get_profile
from native.errors import BuildError
from native.logger import G_LOGGER

_CONSTRAINT_FLAGS = frozenset({BuilderFlag.PREFER_PRECISION_CONSTRAINTS.value,
                               BuilderFlag.OBEY_PRECISION_CONSTRAINTS.value})


class Builder:
    """TensorRT's IBuilder: a factory for networks, configs and profiles, and the engine builder."""

    def __init__(self, logger=None):
        self.logger = logger or G_LOGGER
        self.platform_has_fast_fp16 = False
        self.platform_has_fast_int8 = False

    def get_max_dla_batch_size(self) -> int:
        """The largest DLA batch (product of the index dims but C, H, W) a loadable accepts (seed 000 L143)."""
        return MAX_BATCH

    @property
    def num_dla_cores(self) -> int:
        return get_profile("orin").num_cores

    def create_network(self, flags=0) -> NetworkDefinition:
        return NetworkDefinition()

    def create_builder_config(self) -> BuilderConfig:
        return BuilderConfig()

    def create_optimization_profile(self) -> OptimizationProfile:
        return OptimizationProfile()

    def build_graph(self, network: NetworkDefinition, config: BuilderConfig, timing_feeds=None, instruments=None,
                    prefix_memo: dict | None = None):
        """The optimised, tactic-annotated Graph (what the plan stores): lower, then the passes of
        builder/pipeline.py under the pass manager (instruments: default_instruments()).

        prefix_memo: a dict the caller keeps across builds of one network it does not change (a precision search's
        probes): the graph after the passes before fusion (folding, shape folding, weight absorption), which do
        not depend on per-layer precisions, is kept there per build setting and copied for the next build, whose
        precision constraints are then applied to it (see `_folded_prefix`)."""
        t0 = time.perf_counter()
        if tune_process_default(False):   # time tactics under the process settings the engine will run with
            config.device.tune_process()
        config.device.begin_build(getattr(config.timing_cache, "device_notes", None))
        try:
            passes = pipeline()
            ctx = PassContext(config=config, logger=self.logger, timing_feeds=timing_feeds)
            ctx.state["network"] = network
            prefix = self._folded_prefix(network, config, passes, ctx, instruments, prefix_memo)
            if prefix is not None:
                graph, nodes_in, names, k = prefix
                passes = passes[k:]
            else:
                graph = lower(network)
                self._check_profiles(graph, config)
                nodes_in, names = len(graph.nodes), None
            if config.layer_precisions or config.layer_output_types:
                from backends.engine.builder.precision_spec import apply_precision_spec
                n = apply_precision_spec(graph, config, known=names)
                self.logger.verbose(f"precision constraints by name: {n} layers constrained")
            if config.get_flag(BuilderFlag.INT8):  # explicit quantization: the Q/DQ weights' scales, before folding
                from backends.engine.builder.passes import int8 as int8_pass   # turns them into float weights
                int8_pass.record_qdq_weights(graph)
            PassManager(passes, default_instruments() if instruments is None else instruments).run(graph, ctx)
        finally:
            config.device.end_build()
        mem = ctx.state.get("memory")
        graph_meta = {"arena_bytes": mem["arena_bytes"], "naive_bytes": mem["naive_bytes"]} if mem else {}
        graph_meta.update({"build_seconds": round(time.perf_counter() - t0, 3), "layers_parsed": nodes_in,
                           "layers_built": len(graph.nodes), "pass_ms": dict(ctx.timings)})
        if getattr(network, "source_model", None):   # the ONNX model it came from (build_plan_from_onnx sets it)
            graph_meta["source_model"] = network.source_model
        graph.meta = graph_meta
        self.logger.info(f"built engine '{graph.name}': {nodes_in} layers → {len(graph.nodes)} in "
                         f"{graph_meta['build_seconds']:.2f} s; weights {graph.weight_bytes() / 2**20:.1f} MiB")
        return graph

    def build_serialized_network(self, network: NetworkDefinition, config: BuilderConfig, timing_feeds=None) -> bytes:
        graph = self.build_graph(network, config, timing_feeds)
        return serialize_plan(graph, config)

    def build_engine(self, network, config):
        return Runtime(self.logger).deserialize_engine(self.build_serialized_network(network, config))

    def _folded_prefix(self, network, config, passes, ctx, instruments, memo):
        """(graph copy, layers parsed, names the precision spec may use, passes done) from `memo`, made on first
        use; None when not asked for or not safe (INT8 and DLA builds: their passes before fusion read
        precisions). The passes before fusion see no precision constraint here; the spec is applied afterwards to
        the layers that survived them (a folded layer is a constant either way: the constraint never reached it)."""
        if memo is None or config.get_flag(BuilderFlag.INT8) or config.uses_dla():
            return None
        k = next(i for i, p in enumerate(passes) if p.name == "fusion")
        shapes = sorted((n, list(np.shape(v)), str(getattr(v, "dtype", ""))) for n, v in (ctx.timing_feeds or {}).items())
        cfg = {k2: v for k2, v in config.to_json().items() if k2 not in ("layer_precisions", "layer_output_types")}
        # how constraints are held (prefer / obey) is read by the precision pass and tactic selection only, after
        # the prefix: a search's empty candidate (no constraint, no flag) and its others share one prefix
        cfg["flags"] = [f for f in cfg["flags"] if f not in _CONSTRAINT_FLAGS]
        key = json.dumps([cfg, shapes], sort_keys=True, default=str)
        hit = memo.get(key)
        if hit is None:
            graph = lower(network)
            self._check_profiles(graph, config)
            nodes_in = len(graph.nodes)
            names = {n.name for n in graph.nodes} | {s for n in graph.nodes for s in n.source_nodes}
            PassManager(passes[:k], default_instruments() if instruments is None else instruments).run(graph, ctx)
            memo[key] = (copy_graph(graph), nodes_in, names)
            return graph, nodes_in, names, k
        ctx.timings["folded prefix (reused)"] = 0.0
        return copy_graph(hit[0]), hit[1], hit[2], k

    @staticmethod
    def _check_profiles(graph, config):
        dynamic = [t.name for t in graph.inputs if t.shape is not None and any(d < 0 for d in t.shape)]
        names = set(graph.input_names)
        for p in config.profiles:
            for name, (lo, opt, hi) in p.shapes.items():
                if name not in names:
                    raise BuildError(f"optimization profile names input '{name}', which the network does not have; "
                                     f"inputs are: {sorted(names)}")
                info = next(t for t in graph.inputs if t.name == name)
                if info.shape is not None:
                    if len(info.shape) != len(lo):
                        raise BuildError(f"optimization profile for '{name}' has rank {len(lo)}, the input has "
                                         f"rank {len(info.shape)} (shape {info.shape})")
                    for i, d in enumerate(info.shape):
                        if d >= 0 and not (lo[i] == opt[i] == hi[i] == d):
                            raise BuildError(f"optimization profile for '{name}' sets dim {i} to {lo[i]}..{hi[i]}, "
                                             f"but the model fixes it at {d}")
        missing = [n for n in dynamic if not any(n in p.shapes for p in config.profiles)]
        if missing and config.profiles:
            raise BuildError(f"inputs {missing} have dynamic dims but the optimization profile does not set them")
