"""Builder: fold → fuse → layout → precision → tactic selection (timed) → memory plan → plan bytes."""
from __future__ import annotations

import time

import numpy as np

from backends.engine.builder.config import BuilderConfig, BuilderFlag, OptimizationProfile
from backends.engine.builder.lower import lower
from backends.engine.builder.memory_plan import plan_memory, tensor_bytes
from backends.engine.builder import passes
from backends.engine.builder.tactic_selection import select_tactics
from backends.engine.network import NetworkDefinition
from backends.engine.runtime.executor import GraphExecutor
from native.config import tune_process_default
from native.device import get_device
from native.errors import BuildError, DebugkitError
from native.logger import G_LOGGER


def opt_feeds(graph, profile: OptimizationProfile | None, seed=0, feeds=None) -> dict:
    """Inputs at the profile's opt shapes for the timing run (user feeds win where given)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in graph.inputs:
        if feeds and t.name in feeds:
            out[t.name] = feeds[t.name]
            continue
        shape = None
        if profile is not None and profile.get_shape(t.name) is not None:
            shape = profile.get_shape(t.name)[1]
        elif t.shape is not None and all(d >= 0 for d in t.shape):
            shape = tuple(t.shape)
        if shape is None or t.kind != "tensor":
            raise BuildError(f"input '{t.name}' has dynamic shape {t.shape} but no optimization profile gives its "
                             f"shapes; add one with profile.set_shape('{t.name}', min, opt, max)")
        dtype = np.dtype(t.dtype or "float32") if t.dtype != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
        if dtype.kind == "f":
            out[t.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype.kind == "b":
            out[t.name] = np.ones(shape, dtype=bool)
        elif dtype.kind in "OUS":
            out[t.name] = np.full(shape, "", dtype=object)
        else:
            out[t.name] = np.zeros(shape, dtype=dtype)
    return out


class Builder:
    """TensorRT's IBuilder: a factory for networks, configs and profiles, and the engine builder."""

    def __init__(self, logger=None):
        self.logger = logger or G_LOGGER
        self.platform_has_fast_fp16 = False
        self.platform_has_fast_int8 = False

    def get_max_dla_batch_size(self) -> int:
        """The largest DLA batch (product of the index dims but C, H, W) a loadable accepts (seed 000 L143)."""
        from native.dla.profiles import MAX_BATCH
        return MAX_BATCH

    @property
    def num_dla_cores(self) -> int:
        from native.dla.profiles import get_profile
        return get_profile("orin").num_cores

    def create_network(self, flags=0) -> NetworkDefinition:
        return NetworkDefinition()

    def create_builder_config(self) -> BuilderConfig:
        return BuilderConfig()

    def create_optimization_profile(self) -> OptimizationProfile:
        return OptimizationProfile()

    def build_graph(self, network: NetworkDefinition, config: BuilderConfig, timing_feeds=None):
        """The optimised, tactic-annotated Graph (what the plan stores)."""
        t0 = time.perf_counter()
        device = config.device
        if tune_process_default(False):   # time tactics under the process settings the engine will run with
            get_device(device).tune_process()
        graph = lower(network)
        self._check_profiles(graph, config)
        int8 = config.get_flag(BuilderFlag.INT8)
        if int8:  # explicit quantization: the Q/DQ weights' scales, before folding turns them into float weights
            from backends.engine.builder.passes import int8 as int8_pass
            int8_pass.record_qdq_weights(graph)
        nodes_in = len(graph.nodes)
        if not config.get_flag(BuilderFlag.DISABLE_CONSTANT_FOLDING):
            n = passes.fold_constants(graph, config, device)
            self.logger.verbose(f"constant folding: folded {n} layers")
        n = passes.eliminate_dead_layers(graph, config)
        self.logger.verbose(f"dead-layer elimination: removed {n} layers")
        profile = config.profiles[0] if config.profiles else None
        if not config.get_flag(BuilderFlag.DISABLE_CONSTANT_FOLDING):
            # fixed input shapes: Shape layers and the shape arithmetic behind them become constants
            from backends.engine.builder.passes.shape_fold import fixed_input_shapes, fold_shapes
            if fixed_input_shapes(graph, config) is not None:
                n = fold_shapes(graph, config, opt_feeds(graph, profile, feeds=timing_feeds), device, self.logger)
                if n:
                    self.logger.verbose(f"shape folding: removed {n} layers")
        if passes.absorb_constant_weights(graph, config):
            passes.eliminate_dead_layers(graph, config)
        calibrated = None
        if int8 and not int8_pass.has_qdq(graph):  # entropy2 / minmax calibrate the network as parsed
            from backends.engine.calibration.collect import calibrate
            calibrated = calibrate(graph, config, self.logger, "before_fusion")
        if not config.get_flag(BuilderFlag.DISABLE_FUSION):
            from backends.engine.builder.passes import fusion
            fusion.run_fusions(graph, config, self.logger)
        if int8:
            if calibrated is None and not int8_pass.has_qdq(graph):  # entropy / percentile: the fused network
                calibrated = calibrate(graph, config, self.logger, "after_fusion")
            int8_pass.assign_int8(graph, config, self.logger, calibrated, network.dynamic_ranges())
        if not config.get_flag(BuilderFlag.DISABLE_LAYOUT) and not config.uses_dla():  # DLA formats are NCHW-based
            from backends.engine.builder.passes import layout
            layout.run_layout(graph, config, self.logger)
        from backends.engine.builder.passes import precision
        precision.assign_precision(graph, config, self.logger)
        env = None
        try:
            feeds = opt_feeds(graph, profile, feeds=timing_feeds)
        except DebugkitError:
            raise
        try:
            env = GraphExecutor(graph, device, keep_all=True).run(feeds)
        except Exception as e:
            self.logger.warning(f"timing run at opt shapes failed ({str(e)[:300]}); tactics are chosen without "
                                f"timing for layers after the failure. Pass representative inputs as timing feeds to fix it")
        if env is not None:
            for node in graph.nodes:
                node.meta["input_shapes"] = [list(np.shape(env[i])) if isinstance(env.get(i), np.ndarray) else None
                                             for i in node.inputs if i is not None]
                node.meta["output_shapes"] = [list(np.shape(env[o])) if o in env and isinstance(env[o], np.ndarray) else None
                                              for o in node.outputs]
        if config.uses_dla():
            from backends.engine.builder.passes.dla import apply_dla, network_ranges
            if env is None:
                raise BuildError("a DLA build needs every tensor's static shape, but the timing run failed (see above)")
            shapes = {k: list(np.shape(v)) for k, v in env.items() if isinstance(v, np.ndarray)}
            apply_dla(graph, config, shapes, network_ranges(network), network, self.logger)
        select_tactics(graph, env, config, device)
        if env is not None:
            mem = plan_memory(graph, {k: tensor_bytes(v) for k, v in env.items()})
            graph_meta = {"arena_bytes": mem["arena_bytes"], "naive_bytes": mem["naive_bytes"]}
            self.logger.info(f"memory plan: {mem['arena_bytes'] / 2**20:.1f} MiB arena for intermediates "
                             f"(unshared: {mem['naive_bytes'] / 2**20:.1f} MiB)")
        else:
            graph_meta = {}
        graph_meta.update({"build_seconds": round(time.perf_counter() - t0, 3), "layers_parsed": nodes_in,
                           "layers_built": len(graph.nodes)})
        if getattr(network, "source_model", None):   # the ONNX model it came from (build_plan_from_onnx sets it)
            graph_meta["source_model"] = network.source_model
        graph.meta = graph_meta
        self.logger.info(f"built engine '{graph.name}': {nodes_in} layers → {len(graph.nodes)} in "
                         f"{graph_meta['build_seconds']:.2f} s; weights {graph.weight_bytes() / 2**20:.1f} MiB")
        del env
        return graph

    def build_serialized_network(self, network: NetworkDefinition, config: BuilderConfig, timing_feeds=None) -> bytes:
        from backends.engine.plan import serialize_plan
        graph = self.build_graph(network, config, timing_feeds)
        return serialize_plan(graph, config)

    def build_engine(self, network, config):
        from backends.engine.runtime import Runtime
        return Runtime(self.logger).deserialize_engine(self.build_serialized_network(network, config))

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
