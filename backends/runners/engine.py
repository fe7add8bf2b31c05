"""EngineRunner: builds our engine from ONNX (or loads a plan) and runs it; taps return intermediate tensors."""
from __future__ import annotations

import os

import numpy as np

from backends.engine.build import build_plan_from_onnx
from backends.engine.builder import BuilderConfig
from backends.engine.dtypes import DataType
from backends.engine.runtime import Runtime
from backends.runners.base import Runner, TensorMeta
from backends.runners.model import load_onnx, markable_onnx_tensors, onnx_input_metadata
from native.device import get_device
from native.device_arrays import is_device_array, shape_and_dtype
from native.errors import UsageError
from native.progress import status

PLAN_MAGIC = b"DKPLAN\r\n"


def is_plan(source) -> bool:
    """True for plan bytes or a path to a plan file (checked by magic, not by extension)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:8]) == PLAN_MAGIC
    if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        with open(source, "rb") as f:
            return f.read(8) == PLAN_MAGIC
    return False


class EngineRunner(Runner):
    """Runs our engine.

    model: an ONNX path / bytes / ModelProto (built at activation) or a plan path / bytes (loaded).
    shapes: {input: shape or (min, opt, max)} for dynamic inputs; when missing, the engine is built at the first
    `infer` with that feed's shapes (the feed also drives tactic timing).
    flags: BuilderFlag values ("fp16", "tf32", ...); config: a ready BuilderConfig (flags given too are set on it).
    calibrator: an INT8 calibrator (e.g. backends.engine.Calibrator(batches)) for flags=("int8",).
    On the cuda device `infer` takes GPU tensors (torch, cupy) as feeds without a host copy, and with
    device_outputs=True returns device arrays (`torch.as_tensor(out, device="cuda")` wraps them, no copy).
    """

    prefix = "engine-runner"

    def __init__(self, model, shapes=None, flags=(), config=None, name=None, device=None, save_plan=None,
                 calibrator=None, profile=False, device_outputs=False):
        super().__init__(name)
        self.device_outputs = device_outputs   # cuda: infer returns device arrays (no device-to-host copy)
        self.calibrator = calibrator
        self.model_source = model
        self.shapes = dict(shapes or {})
        self.flags = list(flags)
        self.config = config
        self.device = None if device is None else get_device(device)   # resolved once (None: the config's)
        self.save_plan = save_plan
        self.engine = self.context = self.onnx_model = None
        self._plan = None
        self.build_seconds = None    # set when this runner built the engine (not for a loaded plan)
        self.profiler = None
        if profile:   # per-layer times of every inference (runtime/profiler.py)
            from backends.engine.runtime.profiler import LayerProfiler
            self.profiler = LayerProfiler()

    # lifecycle ---------------------------------------------------------------------------------------
    def _activate(self):
        if is_plan(self.model_source):
            self._load_plan(self.model_source)
            return
        self.onnx_model = load_onnx(self.model_source)
        meta = onnx_input_metadata(self.onnx_model)
        unknown = [k for k in self.shapes if k not in meta]
        if unknown:
            raise UsageError(f"shape given for unknown input(s) {unknown}; the model's inputs are {list(meta)}")
        if all(not m.is_dynamic() or m.name in self.shapes for m in meta.values()):
            self._build()

    def _deactivate(self):
        self.engine = self.context = None

    def _build(self, timing_feeds=None):
        ranges = {k: v for k, v in self.shapes.items() if _is_range(v)}
        shapes = {k: v for k, v in self.shapes.items() if not _is_range(v)}
        import time

        config = self.config or BuilderConfig()
        if self.calibrator is not None:
            config.int8_calibrator = self.calibrator
        t0 = time.perf_counter()
        status(f"building {self.name} …")
        plan = build_plan_from_onnx(self.onnx_model, shapes=shapes, flags=self.flags,
                                    ranges=ranges, device=self.device, timing_feeds=timing_feeds, config=config)
        self.build_seconds = time.perf_counter() - t0
        if self.save_plan:
            from native.files import write_bytes
            write_bytes(self.save_plan, plan, "--save-engine plan")
        self._load_plan(plan)
        status(f"building {self.name} … done ({len(self.engine.graph.nodes)} layers, {self.build_seconds:.2f} s)")

    def _load_plan(self, plan):
        self.engine = Runtime().deserialize_engine(plan)   # the plan names its device
        have = getattr(self.engine.device, "name", self.engine.device)
        want = getattr(self.device, "name", self.device)
        if want is not None and have != want:
            what = self.model_source if isinstance(self.model_source, (str, os.PathLike)) else "the plan"
            raise UsageError(f"{what} was built for device '{have}', but device '{want}' was asked for (--device "
                             f"{want}); a plan runs where it was built: rebuild it with --device {want}, or drop "
                             f"--device")
        self.context = self.engine.create_execution_context()

    # queries -----------------------------------------------------------------------------------------
    def _input_metadata(self):
        if self.engine is None:
            return onnx_input_metadata(self.onnx_model)
        meta = {}
        # a type the engine has no DataType for (int4, uint4, float4e2m1, float8e5m2, complex) is declared by the
        # ONNX model: the feed is generated in it, and the kernels compute on those values
        onnx_meta = onnx_input_metadata(self.onnx_model) if self.onnx_model is not None else {}
        profile = self.engine.profiles[self.context.active_profile] if self.engine.profiles else None
        for t in self.engine.graph.inputs:
            shape = None if t.shape is None else tuple(
                (t.dim_names.get(i) or -1) if d < 0 else d for i, d in enumerate(t.shape))
            if profile is not None and profile.get_shape(t.name) is not None:
                shape = tuple(profile.get_shape(t.name)[1])   # a plan's profile fixes the shape to generate
            declared = onnx_meta.get(t.name)
            dtype = _numpy_dtype(t.dtype) if t.dtype or declared is None else declared.dtype   # int4, float8e5m2..
            meta[t.name] = TensorMeta(t.name, dtype, shape)
        return meta

    @property
    def build_config(self) -> dict:
        return dict(self.engine.header.get("build_config", {})) if self.engine is not None else {}

    def output_names(self):
        if self.engine is not None:
            return list(self.engine.graph.output_names)
        return [o.name for o in self.onnx_model.graph.output]

    def observable_tensors(self):
        """ONNX tensors the engine computes at layer boundaries (a fused layer shows only its fused output)."""
        self._require_built()
        engine_names = set(self.engine.tensor_names())
        aliases = self.engine.graph.aliases
        inputs = set(self.engine.graph.input_names)
        if self.onnx_model is not None:
            candidates = markable_onnx_tensors(self.onnx_model)
        else:
            candidates = [n for n in self.engine.tensor_names() if n not in inputs]
            consts = {o for n in self.engine.graph.nodes if n.kind == "Constant" for o in n.outputs}
            candidates = [n for n in candidates if n not in consts]
        return [t for t in candidates if aliases.get(t, t) in engine_names and aliases.get(t, t) not in inputs]

    def _require_built(self):
        if self.engine is None:
            raise UsageError(f"{self.name}: the engine is built at the first infer() (dynamic input shapes); "
                             f"pass shapes= to build at activation")

    # inference ---------------------------------------------------------------------------------------
    def check_feeds(self, feeds):
        if self.engine is None:
            super().check_feeds(feeds)   # against the ONNX inputs; the engine checks itself after the build

    def _infer(self, feeds, taps):
        if self.engine is None:
            self.shapes.update({k: tuple(shape_and_dtype(v)[0]) for k, v in feeds.items()})
            on_device = any(is_device_array(v) for v in feeds.values())
            self._build(timing_feeds=None if on_device else feeds)   # GPU tensors: the builder makes its own
        feeds = {k: v if type(v) is np.ndarray or is_device_array(v) else np.asarray(v) for k, v in feeds.items()}
        self.context.profiler = self.profiler
        return self.context.execute(feeds, taps=taps, device_outputs=self.device_outputs)


def _is_range(v):
    return isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (list, tuple)) for x in v)


def _numpy_dtype(name) -> np.dtype:
    """The numpy dtype of an engine tensor type name: what the input is fed as (bfloat16/float8 through ml_dtypes)."""
    if not name:
        return np.dtype(np.float32)
    if name == "object":
        return np.dtype(object)
    try:
        return DataType(name).numpy
    except ValueError:
        return np.dtype(name)
