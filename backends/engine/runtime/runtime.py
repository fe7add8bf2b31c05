"""The runtime: deserialise a plan into an Engine, run it through ExecutionContexts.

Contexts are independent (each owns its shapes and buffers), so several may run one engine at once.
`execute(feeds, taps=[...])` also returns the named intermediate tensors; taps read values the engine computes
anyway, so asking for them changes neither fusion nor tactics.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from backends.engine.engine_graph import node_format
from backends.engine.plan import deserialize_plan, plan_header
from backends.engine.profile import OptimizationProfile
from backends.engine.runtime.arena import ArenaCache
from backends.engine.runtime.executor import GraphExecutor
from native.config import settings, tune_process_default
from native.device import device_for_plan
from native.device_arrays import is_device_array, shape_and_dtype
from native.errors import DebugkitError, FeedError, InputFileError, PlanError, ShapeError, UsageError
from native.logger import G_LOGGER


class Runtime:
    """Loads plans. Options (all explicit, none process-wide unless asked for):

    device: run on this device instead of the one the plan names.
    tune_process: apply the device's process-wide tuning when an engine is loaded (CPU: kernel thread pool,
        OpenBLAS single-threaded, glibc keeping freed buffers mapped; see native/cpu/threads.py). Default: off,
        or DEBUGKIT_TUNE_PROCESS; the `debugkit` CLI and tools/benchmark.py turn it on. Undo with
        `Engine.untune_process()`.
    check_fingerprint: refuse (PlanError) a plan whose recorded device fingerprint (device kind, machine
        architecture) differs from this machine's. False is the opt-out for a CPU plan moved between machines
        (default: True, or DEBUGKIT_CHECK_FINGERPRINT; the CLI's --ignore-fingerprint).
    """

    def __init__(self, logger=None, device=None, *, tune_process=None, check_fingerprint=None):
        self.logger = logger or G_LOGGER
        self.device = device
        self.tune_process = tune_process_default(False) if tune_process is None else bool(tune_process)
        self.check_fingerprint = settings().check_fingerprint if check_fingerprint is None else bool(check_fingerprint)

    def deserialize_engine(self, plan) -> "Engine":
        if isinstance(plan, (str, os.PathLike)):
            path = os.fspath(plan)
            if not os.path.exists(path):
                raise InputFileError(f"plan file not found: {path}")
            plan = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else b""
        header, graph = deserialize_plan(plan)  # header checked against plan_schema
        try:
            return Engine(header, graph, self.device, self.logger, tune_process=self.tune_process,
                          check_fingerprint=self.check_fingerprint)
        except DebugkitError:
            raise
        except Exception as e:  # a header the schema let through that still cannot be assembled: the plan's fault
            raise PlanError(f"plan cannot be assembled into an engine: {type(e).__name__}: {e}") from e


    def engine_from_graph(self, graph, config) -> "Engine":
        """An engine straight from a graph Builder.build_graph just made with `config`, without the plan's bytes:
        for a search that builds many short-lived engines (serializing, checksumming and parsing a plan was ~15% of
        a precision probe on bert_mini). The engine uses the graph itself: build one graph per engine. The same
        layers, tactics and weights run as from the plan, so outputs are identical."""
        return Engine(plan_header(config), graph, self.device, self.logger, tune_process=self.tune_process,
                      check_fingerprint=False)


class Engine:
    def __init__(self, header: dict, graph, device=None, logger=None, *, tune_process=False, check_fingerprint=True):
        self.header = header
        self.graph = graph
        self.logger = logger or G_LOGGER
        recorded = header.get("device", {}) or {}
        dev = device_for_plan(device or recorded.get("device", "cpu"))
        self.device = dev      # the Device this engine runs on, resolved once
        if check_fingerprint and dev.name == recorded.get("device", "cpu"):
            why = dev.check_fingerprint(recorded)
            if why:
                raise PlanError(f"plan was built for another machine ({why}); rebuild it here, or load it anyway "
                                f"with Runtime(check_fingerprint=False) / --ignore-fingerprint (safe for CPU plans "
                                f"moved between machines of one architecture family)")
        cfg = header.get("build_config", {})
        self.profiles = [OptimizationProfile.from_json(p) for p in cfg.get("profiles", [])]
        self._device = dev
        dev.load_plan_extras(header.get("device_extras") or {})
        self.tuned = dev.tune_process() if tune_process else False
        self.executor = GraphExecutor(graph, dev)

    def untune_process(self) -> bool:
        """Undo the process-wide tuning this engine's load applied (see Runtime)."""
        return self._device.untune_process()

    # I/O description ---------------------------------------------------------------------------------
    @property
    def num_io_tensors(self):
        return len(self.graph.inputs) + len(self.graph.outputs)

    def get_tensor_name(self, i):
        io = self.graph.inputs + self.graph.outputs
        return io[i].name

    def _info(self, name):
        for t in self.graph.inputs + self.graph.outputs:
            if t.name == name:
                return t
        raise FeedError(f"engine has no I/O tensor '{name}'; it has {[t.name for t in self.graph.inputs + self.graph.outputs]}")

    def get_tensor_mode(self, name):
        return "INPUT" if name in self.graph.input_names else ("OUTPUT" if self._info(name) else None)

    def get_tensor_shape(self, name):
        return tuple(self._info(name).shape or ())

    def get_tensor_dtype(self, name):
        return self._info(name).dtype

    def get_tensor_profile_shape(self, name, profile_index=0):
        return self.profiles[profile_index].get_shape(name) if self.profiles else None

    @property
    def num_optimization_profiles(self):
        return max(1, len(self.profiles))

    @property
    def num_layers(self):
        return len(self.graph.nodes)

    def create_execution_context(self) -> "ExecutionContext":
        return ExecutionContext(self)

    def create_engine_inspector(self) -> "EngineInspector":
        return EngineInspector(self)

    def tensor_names(self) -> list[str]:
        """Every tensor a tap can return (engine-observable names), in execution order."""
        names = list(self.graph.input_names)
        for n in self.graph.nodes:
            names.extend(n.outputs)
        return names


class ExecutionContext:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.input_shapes: dict[str, tuple] = {}
        self.active_profile = 0
        self.debug_sync = False
        self.profiler = None   # an IProfiler (runtime/profiler.py): per-layer times of every execute
        # activations live in one arena per context and input-shape signature (runtime/arena.py); False: every
        # layer allocates its own outputs
        self.use_arena = True
        self.arenas = ArenaCache()
        self.timings = None    # {"h2d_ms", "compute_ms", "d2h_ms"} of the last execute on a device with own memory
        self.host_timings = None   # {"enqueue_ms"}: the host's time to enqueue the last execute's compute
        self._checked_shapes = {}   # (input, profile) -> the feed shape last accepted there
        self._quick = None          # the last plain run's plan and feeds, for the next like it (_hold_quick)

    @property
    def arena_bytes(self) -> int:
        """Bytes this context holds in activation arenas (all shape signatures met so far)."""
        return self.arenas.nbytes

    def set_optimization_profile(self, index: int):
        if self.engine.profiles and not 0 <= index < len(self.engine.profiles):
            raise ShapeError(f"engine has {len(self.engine.profiles)} optimization profiles; index {index} is invalid")
        self.active_profile = index

    def set_input_shape(self, name: str, shape) -> bool:
        self.__dict__.setdefault("_checked_shapes", {}).clear()
        info = self.engine._info(name)
        shape = tuple(int(d) for d in shape)
        self._check_shape(info, shape)
        self.input_shapes[name] = shape
        return True

    def get_tensor_shape(self, name):
        return self.input_shapes.get(name, self.engine.get_tensor_shape(name))

    def _check_shape(self, info, shape):
        if info.shape is not None and info.kind == "tensor":
            if len(shape) != len(info.shape):
                raise ShapeError(f"input '{info.name}' expects rank {len(info.shape)} (shape {info.shape}), "
                                 f"got shape {list(shape)}")
            for i, (want, got) in enumerate(zip(info.shape, shape)):
                if want >= 0 and want != got:
                    dim = info.dim_names.get(i) or f"dim {i}"
                    raise ShapeError(f"input '{info.name}' {dim} must be {want}, got shape {list(shape)}")
        if self.engine.profiles:
            self.engine.profiles[self.active_profile].check(info.name, shape)

    def _check_feeds(self, feeds: dict):
        """The feeds in the graph's input order (what executor.run_outputs takes), each checked (dtype; shape, once
        per shape and profile) or converted (np.asarray)."""
        spec = self._input_dtypes
        out = {}
        if len(feeds) == len(spec):
            try:
                for info, want in spec:
                    out[info.name] = feeds[info.name]
            except KeyError:
                out = None
        else:
            out = None
        if out is None:   # (a name unknown or missing: the checks below say which)
            names = self._input_names
            unknown = [k for k in feeds if k not in names]
            if unknown:
                raise FeedError(f"unknown input name(s) {unknown}; the engine's inputs are {names}")
            missing = [k for k in names if k not in feeds]
            if missing:
                raise FeedError(f"missing feed(s) for input(s) {missing}")
        checked = self._checked_shapes
        profile = self.active_profile
        for info, want in spec:
            if want is None:    # not a tensor input (sequence, optional): passed as given
                continue
            v = out[info.name]
            if type(v) is np.ndarray:
                shape, dtype = v.shape, v.dtype
            elif is_device_array(v):   # a GPU tensor (torch, cupy): checked from its interface, never copied here
                if self.engine._device.host_memory:
                    raise FeedError(f"input '{info.name}' is a GPU tensor, but this engine runs on "
                                    f"'{self.engine._device.name}' (host memory): pass a host array "
                                    f"(e.g. tensor.cpu().numpy()) or build for --device cuda")
                shape, dtype = shape_and_dtype(v)
            else:
                v = out[info.name] = np.asarray(v)
                shape, dtype = v.shape, v.dtype
            if want is not True and dtype is not want and dtype != want and dtype.name != info.dtype and not (
                    info.dtype == "object" and dtype.kind in "OUS"):
                raise FeedError(f"input '{info.name}' expects dtype {info.dtype}, got {dtype.name}; cast the feed "
                                f"(e.g. array.astype(np.{info.dtype}))")
            key = (info.name, profile)
            if checked.get(key) != shape:   # a shape already accepted at this profile is not checked again
                self._check_shape(info, shape)
                checked[key] = shape
        return out

    @property
    def _input_names(self):
        names = self.__dict__.get("_names_cache")
        if names is None:
            names = self.__dict__["_names_cache"] = self.engine.graph.input_names
        return names

    @property
    def _input_name_set(self):
        names = self.__dict__.get("_name_set_cache")
        if names is None:
            names = self.__dict__["_name_set_cache"] = frozenset(self._input_names)
        return names

    @property
    def _input_dtypes(self):
        """Per graph input (info, expected numpy dtype | True for any | None for a non-tensor input), made once."""
        cached = self.__dict__.get("_dtypes_cache")
        if cached is None:
            cached = []
            for info in self.engine.graph.inputs:
                if info.kind != "tensor":
                    cached.append((info, None))
                elif info.dtype is None:
                    cached.append((info, True))
                else:
                    try:
                        cached.append((info, np.dtype(info.dtype)))
                    except TypeError:   # a dtype numpy cannot name (e.g. bfloat16 without ml_dtypes)
                        cached.append((info, _NamedDtype(info.dtype)))
            self.__dict__["_dtypes_cache"] = cached
        return cached

    def _hold_quick(self, feeds, last):
        """After a plain run that reused or set the arena's last plan with its positional function: keep (that
        `last`, the profile, the plan's keyed run for per input (name, shape, dtype): compiled.keyed_runner), so
        that the next execute with feeds of those names, shapes and dtypes (which _check_feeds accepted at this
        profile) runs that plan straight away, without _check_feeds' pass, executor.run_outputs' frame (~1-1.5 us
        of oww_alexa's ~14) and run_outputs' feeds list, loops and dict(zip) (~0.5-1 us more: h82)."""
        self._quick = None
        if last is None or not last[0].fast_pos or len(last[1]) != len(feeds):
            return
        for v, (shape, dtype) in zip(feeds.values(), last[1]):   # (the feeds this run checked: its plan)
            if type(v) is not np.ndarray or v.shape != shape or v.dtype is not dtype:
                return
        run = last[0].keyed(tuple((name, shape, dtype) for name, (shape, dtype) in zip(feeds, last[1])))
        if run is not None:
            self._quick = (last, self.active_profile, run)

    def execute(self, feeds: dict, taps=(), device_outputs: bool = False) -> dict:
        """Run the engine; returns {output name: array} plus any tapped intermediate tensors.

        On a device with its own memory (CUDA) feeds may be GPU tensors (torch, cupy: `__cuda_array_interface__`),
        used in place with no host copy, and `device_outputs=True` returns the results as device arrays of their
        own memory (wrap them with `torch.as_tensor(x, device="cuda")`) instead of copying them to the host.
        `self.timings` then holds the last execution's host-to-device, compute and device-to-host times in ms,
        measured apart on the device's clock."""
        quick = self._quick
        if quick is not None and not taps and self.arenas.last is quick[0] and self.use_arena and \
                not self._graph_mode and getattr(self, "profiler", None) is None and self.active_profile == quick[1]:
            ex = self.engine.executor
            # (a plan whose straight-line functions were made again, streams.Region's drop_region, has none yet)
            if quick[0][0].steps_ref is ex.steps and quick[0][0].fast_pos is not None and not ex._fallback and \
                    not ex.keep_all:
                enqueued = time.perf_counter()
                result = quick[2](feeds, self.arenas.workspace)   # None, nothing run: feeds not as last time
                if result is not None:
                    self.host_timings = {"enqueue_ms": (time.perf_counter() - enqueued) * 1e3}
                    return result
        feeds = self._check_feeds(feeds)
        dev = self.engine._device
        if not taps and dev.host_memory and not self._graph_mode and getattr(self, "profiler", None) is None \
                and not dev.has_timeline:   # the plain host run: no taps, timeline, profiler or copies
            enqueued = time.perf_counter()
            memory = self.arenas if self.use_arena else None
            result = self.engine.executor.run_outputs(feeds, memory)
            self.host_timings = {"enqueue_ms": (time.perf_counter() - enqueued) * 1e3}
            if memory is not None:
                self._hold_quick(feeds, memory.last)
            return result
        if taps:
            aliases = self.engine.graph.aliases
            resolved = {t: aliases.get(t, t) for t in taps}
        else:
            resolved = {}
        profiler = getattr(self, "profiler", None)
        trace = profiler if hasattr(profiler, "begin") else None   # a timeline recorder (runtime/trace.py)
        timeline = dev.timeline() if dev.has_timeline else None
        if profiler is not None and hasattr(profiler, "start_inference"):
            profiler.start_inference()
            profiler.tactics = {n.name: n.tactic_name for n in self.engine.graph.nodes}
        clock = time.perf_counter
        if self._graph_mode and not resolved and profiler is None:
            enqueued = clock()
            env = self._graph_launch(feeds, timeline)
        else:
            if not dev.host_memory:   # a device with its own memory: feeds in, results out (one copy each)
                tok = trace.begin("H2D", "copy") if trace is not None else None
                feeds = {k: dev.copy_to_device(v) for k, v in feeds.items()}
                timeline.mark("h2d")
                if tok is not None:
                    trace.end(tok)
            memory = self.arenas if self.use_arena else None
            enqueued = clock()
            env = self.engine.executor.run(feeds, keep=resolved.values(), profiler=profiler, memory=memory)
        # the host's time to enqueue the compute (on a synchronous device, the compute itself; with a captured
        # graph, its launch: the feeds' copies into the graph's inputs are the H2D phase)
        launched = getattr(self._graph, "launch_seconds", None) if self._graph_mode and profiler is None and \
            not resolved else None
        self.host_timings = {"enqueue_ms": (launched if launched is not None else clock() - enqueued) * 1e3}
        if timeline is not None:
            timeline.mark("compute")
        if trace is not None:     # the host's wait for the device, a span of its own on the timeline
            tok = trace.begin("sync", "sync")
            dev.synchronize()
            trace.end(tok)
        outputs = self.__dict__.get("_output_names") or self.__dict__.setdefault(
            "_output_names", self.engine.graph.output_names)
        if dev.host_memory:
            result = {name: env[name] for name in outputs}
            for t, r in resolved.items():
                if r in env:
                    result[t] = env[r]
            if trace is not None:
                trace.end_inference()
            return result
        tok = trace.begin("D2H", "copy") if trace is not None else None
        out = dev.duplicate if device_outputs else dev.copy_to_host
        result = {name: out(env[name]) for name in outputs}
        for t, r in resolved.items():
            if r in env:
                result[t] = out(env[r])
        if tok is not None:
            trace.end(tok)
        if timeline is not None:
            timeline.mark("d2h")
            self.timings = timeline.durations()   # waits for the last event: device outputs are ready to share
        if trace is not None:
            trace.end_inference()
        return result

    # CUDA graphs (trtexec --useCudaGraph) ----------------------------------------------------------------
    _graph_mode = False

    def enable_cuda_graph(self, on: bool = True):
        """Capture the whole execution as one CUDA graph at the first execute (and again when input shapes
        change), then replay it. Needs a device with graphs (cuda) and every layer on it; executes with taps or
        a profiler run without the graph."""
        if on and not self.engine._device.supports_graphs:
            raise UsageError(f"CUDA graphs need an engine on the cuda device; this engine runs on "
                             f"'{self.engine._device.name}' (build or run it with --device cuda)")
        self._graph_mode = bool(on)
        self._graph = None

    def _graph_launch(self, feeds, timeline):
        dev = self.engine._device
        key = tuple((k, tuple(shape_and_dtype(v)[0]), shape_and_dtype(v)[1].str) for k, v in sorted(feeds.items()))
        graph = getattr(self, "_graph", None)
        if graph is None or graph.key != key:
            self._graph = None
            memory = self.arenas if self.use_arena else None   # warm-up plans the arena; the graph writes into it
            self.engine.executor.run({k: dev.copy_to_device(v) for k, v in feeds.items()}, memory=memory)
            dev.synchronize()
            graph = self._graph = dev.capture(lambda f: self.engine.executor.run(f, memory=memory), feeds,
                                              self.engine.graph.output_names)
            if timeline is not None:
                timeline.reset()
        return graph.launch(feeds, timeline)

    def replay(self, stream):
        """Launch this context's captured execution again on `stream` (a device stream of `new_stream()`), with
        the inputs of its last execute, results left on the device: several contexts replaying on streams of their
        own are in flight at once (`bench --streams N --use-cuda-graph`). Needs enable_cuda_graph() and one
        execute since. For timing: concurrent replays may share per-process workspaces (cuBLASLt's), so their
        outputs are not to be read."""
        graph = getattr(self, "_graph", None)
        if not self._graph_mode or graph is None:
            raise UsageError("replay needs a captured execution: enable_cuda_graph() and one execute first")
        graph.replay(stream)

    execute_v2 = execute

    def execute_async_v3(self, feeds, stream=None):
        """TensorRT's enqueue. The engine's device validates `stream` (the CPU has none: None or 0, else a
        UsageError); on a synchronous device the results are ready on return."""
        self.engine._device.check_stream(stream)
        return self.execute(feeds)


def output_types(node) -> list:
    """The storage type of each output as the layer writes it (None where it is not a float tensor of the
    network's float32 data, e.g. shapes and indices)."""
    types = node.meta.get("output_types") or []
    return [types[i] if i < len(types) and types[i] else ("float32" if node.precision == "float32" else None)
            for i in range(len(node.outputs))]


class _NamedDtype:
    """An expected input dtype numpy cannot construct by name: compared by name (as before)."""

    def __init__(self, name):
        self.name = name

    def __ne__(self, other):
        return getattr(other, "name", None) != self.name

    def __eq__(self, other):
        return getattr(other, "name", None) == self.name

    __hash__ = object.__hash__


class EngineInspector:
    """Per-layer information as JSON: name, fused source names, kind, tactic, precision, shapes."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def get_layer_information(self, index: int, fmt="json") -> str:
        return json.dumps(self._layer(self.engine.graph.nodes[index]))

    def _layer(self, n) -> dict:
        return {"Name": n.name, "Fused": n.fused_name, "SourceNodes": n.source_nodes, "LayerType": n.kind,
                "Inputs": [i for i in n.inputs if i is not None], "Outputs": n.outputs,
                "InputShapes": n.meta.get("input_shapes"), "OutputShapes": n.meta.get("output_shapes"),
                "TacticName": n.tactic_name, "TacticValue": n.tactic_id,
                # what the tactic runs inside, as its library names it (a cuDNN engine config): the loaded engine
                # builds that one
                "TacticConfig": n.meta.get("tactic_config") or None, "Precision": n.precision,
                "Format": node_format(n),
                "Math": n.meta.get("math") or None, "OutputTypes": output_types(n),
                "Timings_ms": n.meta.get("timings_ms"), "OutputMemory": self._memory.get(n.name),
                # what the builder timed to choose the layer's precision / layout (devices that choose by timing)
                "PrecisionTimings_ms": n.meta.get("precision_ms"), "LayoutTimings_ms": n.meta.get("layout_ms"),
                # INT8 builds: why a layer INT8 could run in does not (or how it does)
                "Int8": n.meta.get("int8_note"),
                "Params": n.params}

    @property
    def _memory(self) -> dict:
        """Per layer, where its outputs live at run time: "arena" (written into the memory plan's views), else
        why the layer allocates them (runtime/arena.py)."""
        if getattr(self, "_memory_cache", None) is None:
            dev, outs = self.engine._device, set(self.engine.graph.output_names)
            self._memory_cache = {}
            for node, tactic, op, _ in self.engine.executor.steps:
                why = dev.output_buffer_reason(tactic, op)
                if why is None and all(o in outs for o in node.outputs):
                    why = "graph output (the caller keeps it)"
                self._memory_cache[node.name] = "arena" if why is None else f"allocated: {why}"
        return self._memory_cache

    def layers(self) -> list[dict]:
        return [self._layer(n) for n in self.engine.graph.nodes]

    def get_engine_information(self, fmt="json") -> str:
        h = self.engine.header
        return json.dumps({"Producer": h.get("producer"), "Device": h.get("device"),
                           "BuildConfig": h.get("build_config"), "Meta": self.engine.graph.meta,
                           "Bindings": [t.to_json() for t in self.engine.graph.inputs + self.engine.graph.outputs],
                           "Layers": self.layers()}, indent=1)
