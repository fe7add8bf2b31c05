"""onnx.backend.base.Backend over our core: prepare = parse → build → plan bytes → runtime, every time.

Models with dynamic input dims are built on first `run`, with a profile fixed at the feeds' shapes.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend as _OnnxBackend
from onnx.backend.base import BackendRep as _OnnxBackendRep

from backends.engine.builder import Builder, BuilderConfig, BuilderFlag
from backends.engine.build import parse_onnx, profile_from_shapes
from backends.engine.runtime import Runtime
from native.logger import G_LOGGER


class BackendRep(_OnnxBackendRep):
    """`tactic_heuristic` (default True): tactics picked by the builder's heuristic, not by timing, so a case's
    result does not depend on which tactic won a timing race on a loaded machine (a bfloat16 case can differ by a
    rounding between tactics)."""

    def __init__(self, model, device="CPU", tactic_heuristic=True):
        self.model = model
        self.tactic_heuristic = tactic_heuristic
        self.device = "cpu" if str(device).upper().startswith("CPU") else str(device).lower()
        self.network, _ = parse_onnx(model)
        self.input_names = [t.name for t in self.network.inputs]
        self.output_names = [vi.name for vi in model.graph.output]
        self.contexts = {}
        self.plan = None
        # sequence / optional inputs have no shape to time with: build on the first run, with its feeds
        static = all(t.kind == "tensor" and t.shape is not None and all(d >= 0 for d in t.shape)
                     for t in self.network.inputs)
        if static:
            self._context_for({})

    def _context_for(self, shapes):
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        if key not in self.contexts:
            config = BuilderConfig()
            config.device = self.device
            config.avg_timing_iterations = 1
            if self.tactic_heuristic:
                config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
            profile = profile_from_shapes(self.network, shapes)
            if profile is not None:
                config.add_optimization_profile(profile)
            feeds = getattr(self, "_feeds", None)
            self.plan = Builder(G_LOGGER).build_serialized_network(self.network, config, timing_feeds=feeds)
            self.contexts[key] = Runtime().deserialize_engine(self.plan).create_execution_context()
        return self.contexts[key]

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        dynamic = {t.name: np.shape(feeds[t.name]) for t in self.network.inputs
                   if t.kind == "tensor" and t.name in feeds and (t.shape is None or any(d < 0 for d in t.shape))}
        self._feeds = feeds
        ctx = self._context_for(dynamic)
        out = ctx.execute(feeds)
        return [out[name] for name in self.output_names]


class Backend(_OnnxBackend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return True

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(model)
        return BackendRep(model, device, tactic_heuristic=kwargs.get("tactic_heuristic", True))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device):
        if str(device).upper().startswith("CUDA"):
            from native.cuda import available
            return available()
        return str(device).upper().startswith("CPU")


prepare = Backend.prepare
run_model = Backend.run_model
supports_device = Backend.supports_device
