"""`debug precision`: the smallest set of layers (ONNX nodes) that must run in higher precision for a check to pass.

A probe builds the engine with the low precision enabled (--fp16 / --int8 / --fp8) and the candidate layers
constrained to the higher precision (preferred: a layer without an implementation in it keeps what it has), runs it on the search's feeds and judges the outputs against the FP32
reference with run's comparison options. `hit` means the check passes.

Modes:
- `minimal` (default): rank layers by sensitivity from one layerwise low-precision run plus one run per layer alone
  (see `sensitivity`), then `peel` the needed layers off the ranking one per round (the shortest passing prefix ends
  in a needed layer) — about k·log2(L) probes for an answer of k layers, 1-minimal for a monotone check.
- `bisect` / `linear` (Polygraphy-compatible): the smallest prefix (or suffix, `direction="reverse"`) of the layers
  in topological order that must be in higher precision — a count, found by bisection or a linear scan.
"""
from __future__ import annotations

import math
import os

import numpy as np

from debugkit.debug.reduce import ReduceProbe, Subgraphs
from native.errors import UsageError

PRECISION_FLAGS = {"fp16": ("fp16",), "int8": ("int8",), "fp8": ("fp8",), "bf16": ("bf16",)}
HIGHER = {"fp32": "fp32", "fp16": "fp16"}


class PrecisionSearchError(UsageError):
    """The search cannot answer (the check fails even with every layer in higher precision, ...)."""


def _have_layer_precisions():
    try:
        import backends.engine.builder.precision_spec  # noqa: F401
    except ImportError:
        return False
    return True


def make_config(low: str, higher: str, layers=(), extra_flags=(), replay=None, recorder=None, calib=None,
                feeds=None, timing_cache=None, base=None):
    """A BuilderConfig with the low precision enabled and `layers` obeying `higher`; `replay` (a tactic replay
    document) keeps the recorded tactic of every layer whose signature did not change, so a probe measures
    precision and not a different tactic; `recorder` records this build's choices; `timing_cache` (a TimingCache
    shared by a search's builds) keeps every layer variant's timings and packed weights, so a probe times and
    prepares only layer variants no earlier build of the search met. `base` (BuildOptions): the command's build
    options (tactics modules, tactic sources, DLA, device, timing cache file, the user's own layer precisions, ...),
    applied first; the search's precision flags, constraints and calibration are added to them."""
    from backends.engine.builder import BuilderConfig, BuilderFlag
    from backends.engine.builder.algorithm_selector import SelectorChain
    if not _have_layer_precisions():
        raise PrecisionSearchError("this build of debugkit has no per-layer precision constraints "
                                   "(--layer-precisions); debug precision needs them")
    from backends.engine.builder.precision_spec import parse_layer_precisions
    # the command's options with the search's own precisions (not none: a --timing-cache file written by the
    # search's base build is checked against the flags of the build that reads it)
    mine = {low} | ({"fp16"} if higher == "fp16" and low in ("int8", "fp8") else set())
    config = BuilderConfig() if base is None else base.replace(
        **{p: p in mine for p in PRECISION_FLAGS}).builder_config()
    for f in PRECISION_FLAGS[low] + tuple(extra_flags):
        config.set_flag(BuilderFlag(f))
    # every layer outside `layers` runs in the low precision, even where a GPU build would time a higher one as
    # faster: the answer is the set that must stay higher, not the set timing happened to leave low
    config.precision_by_timing = False
    if higher == "fp16" and low in ("int8", "fp8"):
        config.set_flag(BuilderFlag("fp16"))
    config.layer_precisions = list(config.layer_precisions) + parse_layer_precisions([(n, higher) for n in layers])
    if layers:   # prefer, not obey: a layer with no implementation in `higher` (a CPU plugin) runs in what it has
        config.set_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
    if low == "int8" and calib is not None:
        from backends.engine import Calibrator
        config.int8_calibrator = Calibrator([feeds], algorithm=calib.get("algorithm", "entropy2"),
                                            cache=calib.get("cache"), percentile=calib.get("percentile", 99.99))
    if timing_cache is not None:
        if config.timing_cache is not None:   # --timing-cache FILE: its timings seed the search's shared cache
            for k, v in config.timing_cache.entries.items():
                timing_cache.entries.setdefault(k, v)
        config.timing_cache = timing_cache
    mine = recorder if recorder is not None else _precision_replayer(replay) if replay is not None else None
    if mine is not None:
        config.algorithm_selector = mine if config.algorithm_selector is None else \
            SelectorChain([mine, config.algorithm_selector])
    return config


def _precision_replayer(doc):
    """A non-strict TacticReplayer that also accepts an engine where most layers changed: a probe that moves many
    layers to the higher precision changes their signatures (timed afresh) but is still the same model."""
    from backends.engine.builder.tactic_replay import TacticReplayer

    class PrecisionReplayer(TacticReplayer):
        def report_algorithms(self, contexts, choices):
            return None

        @property
        def memo_token(self):
            """Its answer depends on the document alone (nothing is reported, staleness is not enforced), so a
            search's builds may reuse each other's per-layer selections (builder/selection_memo.py). The document's
            content, not its id: a worker unpickles a copy per task, and may serve another search later."""
            if self._token is None:
                import hashlib
                import json
                self._token = ("precision-replay", hashlib.sha1(json.dumps(
                    self.doc.get("layers"), sort_keys=True, default=str).encode()).hexdigest())
            return self._token

        _token = None

    return PrecisionReplayer(doc, strict=False, source="the base build's tactics")


def tactic_recorder():
    """A TacticRecorder when the build has one (tactics issue), else None."""
    try:
        from backends.engine.builder.tactic_replay import TacticRecorder
    except ImportError:
        return None
    return TacticRecorder()


def _rel_err(a, ref) -> float:
    """The largest absolute difference over the reference's largest finite magnitude; inf where the low-precision
    value is not finite and the reference is. A reference at its own type's largest magnitude (an attention mask's
    float32 lowest, "minus infinity" to the model) is saturated: an infinity of the same sign there is no error
    (FP16 cannot hold -3.4e38, the Softmax after it computes the same zeros), so such a mask ranks by what it really
    adds and the layers that overflow ahead of it are probed first."""
    a, ref = np.asarray(a), np.asarray(ref)
    if a.shape != ref.shape or ref.dtype.kind != "f" or not ref.size:
        return 0.0
    with np.errstate(all="ignore"):
        a64, r64 = a.astype(np.float64), ref.astype(np.float64)
        top = float(np.finfo(ref.dtype).max)
        saturated = np.abs(r64) >= top
        if saturated.any():
            r64 = np.where(saturated, np.copysign(np.inf, r64), r64)
        d = np.abs(a64 - r64)
        if saturated.any():   # inf - inf of the same sign is nan: equal values are no error
            d = np.where(a64 == r64, 0.0, d)
            finite = np.isfinite(r64)
            scale = float(np.max(np.abs(r64[finite]))) if finite.any() else 0.0
        else:
            scale = float(np.max(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else 0.0
    if not np.all(np.isfinite(d)):
        return math.inf
    return float(d.max()) / max(scale, 1e-30)


class PrecisionProbe:
    """hit(layers) = the check passes with `layers` in higher precision. Picklable; the model loads once per worker."""

    def __init__(self, model_path, feeds, reference, options, low="fp16", higher="fp32", extra_flags=(), calib=None,
                 device="cpu", build=None):
        self.model_path, self.feeds, self.reference = os.path.abspath(model_path), feeds, reference
        self.device = device
        self.build = build   # the command's BuildOptions (debugkit/options.py), the base of every probe's config
        self.options, self.low, self.higher, self.extra_flags = options, low, higher, tuple(extra_flags)
        self.calib = calib
        self.replay = None   # tactic replay document of the base low-precision build (set by the search)
        self._cache = None   # the timing cache this process's probes share (not pickled: one per worker)
        self._network = None  # the model parsed once per process (not pickled)
        self._prefix = {}     # its graph after the passes before fusion, per build setting (Builder.build_graph)
        self.last_cost = {}  # build and run seconds of the last engine_outputs
        self.model_bytes = None   # set by ship(): workers get the model itself, not a path on this machine
        self.model_key = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = state["_network"] = None
        state["serialized"] = None
        state["last_cost"] = {}
        state["_prefix"] = {}
        return state

    def ship(self, model):
        """Make this probe independent of this machine's files before it goes to workers (local or on other
        nodes): it carries the model's bytes (external data included) and only the file's name for messages.
        Workers parse it once per search (WorkerCache, by the model's sha256)."""
        import hashlib
        # the timings measured here so far go along, so workers time only what the search has not met
        self.seed_timings = dict(self.timing_cache().entries)
        if self.model_bytes is None:   # shipped again (after the base build): only the timings are new
            # `serialized`: the same model's bytes, made beforehand (the search serializes them on a thread)
            self.model_bytes = getattr(self, "serialized", None) or model.SerializeToString()
            self.serialized = None
            self.model_key = hashlib.sha256(self.model_bytes).hexdigest()
            self.model_path = os.path.basename(self.model_path)
        return self

    def model_source(self):
        """What a runner is built from: the model's bytes when shipped, else its path."""
        return self.model_bytes if self.model_bytes is not None else self.model_path

    def network(self):
        """The parsed model, once per process: a build lowers it into a graph of its own and leaves it as it
        is, so every probe builds from the same NetworkDefinition instead of parsing the file again."""
        if self._network is None:
            from backends.engine.build import parse_onnx, source_model_record

            def parse():
                from backends.runners.model import markable_onnx_tensors
                net, parser = parse_onnx(self.model_source())
                net.source_model = source_model_record(self.model_source())
                net.markable_tensors = markable_onnx_tensors(parser.model)   # what taps="all" may name
                return net
            if self.model_key is not None:
                from debugkit.debug.executor import WorkerCache
                self._network = WorkerCache.get(("network", self.model_key), parse)
            else:
                self._network = parse()
        return self._network

    def timing_cache(self):
        """The TimingCache every build of this search in this process shares (timings and packed weights); a
        shipped probe's workers keep one per model (it outlives the probe object Ray unpickles per task)."""
        if self._cache is None:
            from backends.engine.builder import TimingCache
            if self.model_key is not None:
                from debugkit.debug.executor import WorkerCache
                seeds = getattr(self, "seed_timings", None) or {}
                self._cache = WorkerCache.get(("timing", self.model_key, self.low, self.higher),
                                              lambda: TimingCache(seeds))
                for k, v in seeds.items():   # a worker's cache made earlier in the search (TimingShare) learns
                    self._cache.entries.setdefault(k, v)   # what the other workers timed since
            else:
                self._cache = TimingCache()
        return self._cache

    def engine_outputs(self, layers, taps=None, recorder=None):
        import time

        from backends.runners import EngineRunner
        config = make_config(self.low, self.higher, layers, self.extra_flags, self.replay, recorder, self.calib,
                             self.feeds, timing_cache=self.timing_cache(), base=self.build)
        shapes, ranges = self._shapes()
        if taps in (None, "all") and self.calib is None:   # build from the parsed model (the base build too)
            return self._probe_outputs(config, shapes, ranges, taps)
        with EngineRunner(self.model_source(), shapes={**shapes, **ranges}, config=config, device=self.device) as r:
            if taps == "all":
                taps = r.observable_tensors()
            t0 = time.perf_counter()
            out = r.infer(self.feeds, taps=taps)
            self.last_cost = {"build_s": round(float(getattr(r, "build_seconds", 0.0) or 0.0), 4),
                              "run_s": round(time.perf_counter() - t0, 4)}
            return out

    def _shapes(self):
        """(the feeds' shapes, the --shape-profiles ranges given for those inputs: a range instead of the shape)."""
        shapes = {k: tuple(np.shape(v)) for k, v in self.feeds.items()}
        ranges = {k: v for k, v in self.build.shape_ranges().items() if k in shapes} if self.build else {}
        return shapes, ranges

    def _probe_outputs(self, config, shapes, ranges=None, taps=None) -> dict:
        """Outputs (and with taps="all" every tensor the engine computes at a layer boundary) of an engine built
        from the parsed model: the passes before fusion once per search, no plan bytes."""
        import time

        from backends.engine import Runtime
        t0 = time.perf_counter()
        net = self.network()
        graph = self._graph(config, shapes, ranges)
        engine = Runtime().engine_from_graph(graph, config)
        context = engine.create_execution_context()
        if taps == "all":   # as EngineRunner.observable_tensors: ONNX tensors the engine computes, not its inputs
            known, aliases, inputs = set(engine.tensor_names()), engine.graph.aliases, set(engine.graph.input_names)
            taps = [t for t in net.markable_tensors if aliases.get(t, t) in known and aliases.get(t, t) not in inputs]
        t1 = time.perf_counter()
        out = context.execute({k: np.asarray(v) for k, v in self.feeds.items()}, taps=taps or ())
        self.last_cost = {"build_s": round(t1 - t0, 4), "run_s": round(time.perf_counter() - t1, 4)}
        return out

    def _graph(self, config, shapes, ranges=None):
        """The built graph of the parsed model at these shapes: the passes before fusion once per search
        (prefix_memo), no plan bytes (the engine runs the graph)."""
        from backends.engine.build import profile_from_shapes
        from backends.engine.builder import Builder
        net = self.network()
        config.device = self.device
        profile = profile_from_shapes(net, shapes, ranges)
        if profile is not None:
            config.add_optimization_profile(profile)
        memo = self._prefix
        if self.model_key is not None:   # a worker's probe objects of one search (one per map) share it
            from debugkit.debug.executor import WorkerCache
            memo = self._prefix = WorkerCache.get(("prefix", self.model_key, self.low, self.higher),
                                                  lambda: self._prefix)
        return Builder().build_graph(net, config, prefix_memo=memo)

    def seeded_timings(self) -> int:
        """How many layer variants the search's timing cache holds before any build: a --timing-cache file's
        (loaded now; make_config would at the first build)."""
        make_config(self.low, self.higher, (), self.extra_flags, timing_cache=self.timing_cache(), base=self.build)
        return len(self.timing_cache().entries)

    def time_share(self, share) -> dict:
        """Build the search's base engine timing only the layer variants in `share` (i, n) (TimingCache.share):
        {"entries": what this build measured, "notes": the device notes, "seconds"}. Its choices are thrown away
        (the variants of other shares are untimed here), so its warnings are held back; the prepared weights and
        plans stay in this process's cache for its later probes."""
        import time

        from native.device import get_device
        from native.logger import G_LOGGER, Severity
        t0 = time.perf_counter()
        cache = self.timing_cache()
        before = set(cache.entries)
        config = make_config(self.low, self.higher, (), self.extra_flags, None, None, self.calib, self.feeds,
                             timing_cache=cache, base=self.build)
        shapes, ranges = self._shapes()
        level, cache.share = G_LOGGER.min_severity, tuple(share)
        G_LOGGER.min_severity = max(level, Severity.ERROR)
        try:
            self._graph(config, shapes, ranges)
        finally:
            cache.share, G_LOGGER.min_severity = None, level
        return {"entries": {k: v for k, v in cache.entries.items() if k not in before},
                "notes": get_device(self.device).build_notes(), "seconds": round(time.perf_counter() - t0, 3)}

    def __call__(self, layers) -> dict:
        from debugkit.debug.checks import CommandCheck
        from native.errors import DebugkitError
        if isinstance(self.options, CommandCheck):
            return self._command(list(layers))
        try:
            out = self.engine_outputs(list(layers))
        except DebugkitError as e:
            return {"hit": False, "reason": f"engine error: {str(e).splitlines()[0][:200]}"}
        return self.judged(out)

    def judged(self, out) -> dict:
        """A probe's record for these engine outputs: the check's verdict, its metrics, the last build's cost."""
        res = self.options.judge(out, self.reference)
        metrics = {k: {m: v for m, v in r.items() if m != "passed" and v is not None}
                   for k, r in res.get("outputs", {}).items()}
        return {"hit": not res["fails"], "reason": res["reason"], "outputs": metrics, **self.last_cost}

    def empty_set_answer(self, base_values):
        """The empty candidate's record from the base build's values, or None when they cannot stand for it. The base
        build is the empty candidate's engine (no layer constrained, the same config; its tactics are the ones the
        probes replay) run with every tensor tapped, and a tap only gives a tensor memory of its own, so its outputs
        are the empty probe's bit for bit (tested on the CPU and, on CNN and MLP engines, on the GPU: the same
        replayed tactics, each tapped tensor only in memory of its own), so the search need not build that engine
        twice (on the GPU the second build cost 1.5-4.5 s of a 25-35 s search). Not for an external --check
        command, nor a calibrated (INT8) base, which is built another way."""
        from debugkit.debug.checks import CommandCheck
        if isinstance(self.options, CommandCheck) or self.calib is not None or not base_values or \
                not all(k in base_values for k in self.reference):
            return None
        return {**self.judged({k: base_values[k] for k in self.reference}), "from": "base build"}


    def _command(self, layers) -> dict:
        """--check CMD: {precisions} is a JSON file with these layers' precisions; the check passing is a hit."""
        import hashlib
        import tempfile
        tag = hashlib.sha1("\n".join(sorted(layers)).encode()).hexdigest()[:12]
        path = os.path.join(tempfile.gettempdir(), f"debugkit_precisions_{os.getpid()}_{tag}.json")
        from native.files import write_json
        write_json(path, {"layer_precisions": {n: self.higher for n in layers}}, "precision file for --check",
                   streamable=False)
        try:
            res = self.options(self._model_file(), None, {"precisions": path})
        finally:
            os.remove(path)
        return {"hit": not res["fails"], "reason": res.get("reason", ""), "rc": res.get("rc")}


    def _model_file(self) -> str:
        """A path to the model for an external --check command: the driver's file, or (shipped) a copy written
        once per worker process into its own temporary directory, removed when the process exits."""
        if self.model_bytes is None:
            return self.model_path
        from debugkit.debug.executor import worker_model_file
        return worker_model_file(self.model_key, self.model_path, self.model_bytes)


def _alone_layout(config):
    """A layer-alone build's config: the device's preferred layout, not a timed one. A layer alone is a layout
    region of its own between reformats to and from the graph's NCHW inputs and outputs, so timing NCHW against
    NHWC there measures those reformats, which the model does not have (a third of a 368-layer ResNet's ranking
    build, on a worker ranking beside the base build: 4.5 of 10 s). Tactics are still timed. A layout the
    command's build options order (prefer_nhwc) stands."""
    if config.prefer_nhwc is None:
        config.prefer_nhwc = bool(config.device.prefers_nhwc)
    return config


class LayerAloneProbe(ReduceProbe):
    """The error one layer adds when it alone runs in low precision: its single-node subgraph, fed FP32 values."""

    def __init__(self, key, low, extra_flags=(), subgraphs=None, calib=None, build=None):
        super().__init__(None, "graph-input", None, PRECISION_FLAGS[low] + tuple(extra_flags), subgraphs, key=key)
        self.low, self.extra_flags = low, tuple(extra_flags)
        # the command's build options, without its layer precisions (they name layers of the whole model)
        self.build = None if build is None else build.replace(layer_precisions=(), layer_output_types=(),
                                                              load_tactics=None, save_tactics=None)
        self.calib = None if calib is None else {**calib, "cache": None}   # its own tensors: calibrated afresh
        self.builds = 0   # engines built by this process's calls (`many` builds one for many layers)
        self.shared_cache = None   # the search's own TimingCache, when the layers alone are built in its process
        self.exchange_dir = None   # a TimingExchange directory shared with the base build running meanwhile

    def __getstate__(self):
        state = dict(self.__dict__)
        state["shared_cache"] = None
        return state

    def timing_cache(self):
        """One TimingCache for every layer-alone build in this process (per worker, by its key): the repeated
        blocks of a model (the same kind, params and shapes) are timed and packed once. In the search's own
        process, the probes' cache (`shared_cache`): the base build has timed and packed most layer variants in
        the low precision already, so a layer alone gets the tactic it has in the engine without timing it again."""
        if self.shared_cache is not None:
            return self.shared_cache
        from debugkit.debug.executor import WorkerCache

        def make():
            from backends.engine.builder import TimingCache
            return TimingCache()
        cache = WorkerCache.get(("alone-timing", self.key, self.low), make)
        if self.exchange_dir and cache.exchange is None:
            from backends.engine.builder.timing_exchange import TimingExchange
            cache.exchange = TimingExchange(self.exchange_dir)
        return cache

    def __call__(self, label) -> float:
        from backends.runners import EngineRunner
        from native.errors import DebugkitError
        model, feeds, expected = self.subgraphs().build([label])
        self.builds += 1
        try:
            config = _alone_layout(make_config(self.low, "fp32", (), self.extra_flags, calib=self.calib, feeds=feeds,
                                               timing_cache=None if self.calib else self.timing_cache(),
                                               base=self.build))
            with EngineRunner(model, config=config) as r:
                out = r.infer(feeds)
        except DebugkitError:
            return 0.0
        return max([_rel_err(out.get(k), v) for k, v in expected.items() if k in out] or [0.0])

    def many(self, labels) -> list:
        """[alone error per label] from one engine: the single-node subgraphs side by side, each tensor renamed
        per layer so none reads another's, built and run once. The same arithmetic as `self(label)` per layer
        (each node is its own layer, fed the same FP32 values, in the same precision), at one build's cost instead
        of one per layer: a 166-layer bert_mini ranked in one build instead of 166. Falls back to one build per
        layer when the combined engine cannot be built or run (a layer alone that fails scores 0, as before),
        for layers with subgraph bodies (their outer names cannot be renamed safely), and with calibration."""
        from native.errors import DebugkitError
        from native.logger import G_LOGGER
        labels = list(labels)
        if self.calib is not None or len(labels) < 2:
            return [self(lab) for lab in labels]
        try:
            model, feeds, expected, alone = self._side_by_side(labels)
            if model is None:
                return [alone[lab] for lab in labels]
            self.builds += 1
            config = _alone_layout(make_config(self.low, "fp32", (), self.extra_flags, feeds=feeds,
                                               timing_cache=self.timing_cache(), base=self.build))
            config.reuse_selections = False   # its layers are renamed apart: no later build repeats one
            out = _engine_run(model, feeds, config)
        except DebugkitError as e:
            G_LOGGER.verbose(f"layers alone side by side failed ({str(e).splitlines()[0][:160]}); one build per "
                             f"layer")
            return [self(lab) for lab in labels]
        errs = []
        for lab in labels:
            exp = expected.get(lab)
            if exp is None:
                errs.append(alone[lab])
            else:
                errs.append(max([_rel_err(out.get(k), v) for k, v in exp.items() if k in out] or [0.0]))
        return errs

    def _side_by_side(self, labels):
        """(model, feeds, {label: {renamed output: expected}}, {label: error of layers evaluated apart})."""
        import onnx
        from onnx import helper
        nodes, inputs, outputs, inits, feeds, expected, alone = [], [], [], [], {}, {}, {}
        first = None
        for i, lab in enumerate(labels):
            m, f, e = self.subgraphs().build([lab])
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                   for n in m.graph.node for a in n.attribute):
                alone[lab] = self(lab)
                continue
            first = first or m
            pre = f"alone{i}::"

            def rename(name, pre=pre):
                return pre + name if name else name
            for n in m.graph.node:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                c.name = rename(n.name or n.output[0])
                c.input[:] = [rename(x) for x in n.input]
                c.output[:] = [rename(x) for x in n.output]
                nodes.append(c)
            for vi, dest in ((m.graph.input, inputs), (m.graph.output, outputs)):
                for v in vi:
                    c = onnx.ValueInfoProto()
                    c.CopyFrom(v)
                    c.name = rename(v.name)
                    dest.append(c)
            for t in m.graph.initializer:
                c = onnx.TensorProto()
                c.CopyFrom(t)
                c.name = rename(t.name)
                inits.append(c)
            feeds.update({rename(k): v for k, v in f.items()})
            expected[lab] = {rename(k): v for k, v in e.items()}
        if first is None:
            return None, feeds, expected, alone
        g = helper.make_graph(nodes, "layers alone", inputs, outputs, inits)
        model = helper.make_model(g, opset_imports=list(first.opset_import), producer_name="debugkit precision")
        model.ir_version = first.ir_version
        model.functions.extend(first.functions)
        return model, feeds, expected, alone


class TimingShare:
    """A worker's share of the base build's tactic timing (`PrecisionProbe.time_share`): with one GPU per worker,
    N workers time the base build's layer variants at once, each a disjoint 1/N of them, and the search's own base
    build then replays their timings instead of timing everything on one GPU."""

    def __init__(self, probe: PrecisionProbe):
        self.probe = probe

    def __call__(self, share) -> dict:
        return self.probe.time_share(share)


def shares_timing(ex, calib=None) -> bool:
    """Whether a search may spread its base build's timing over the executor's workers: each has a GPU of its own
    (workers timing on shared CPU cores would measure each other's load), and no INT8 calibration (whose
    build calibrates first). The search also skips it when a --timing-cache file already holds timings: then
    the base build has little to time and the workers' builds (~8 s each on a 368-layer model) would only
    delay it."""
    return calib is None and ex.workers > 1 and ex.own_gpus


def share_timing(probe: PrecisionProbe, ex) -> dict:
    """Time the base build's layer variants on the executor's workers, one share each, and merge what they measured
    into the probe's (this process's) timing cache. Returns {"variants", "seconds", "shares": [seconds each]}."""
    import time
    t0 = time.perf_counter()
    n = ex.workers
    got = ex.map(TimingShare(probe), [(i, n) for i in range(n)])
    cache = probe.timing_cache()
    variants = 0
    for g in got:
        for k, v in g["entries"].items():
            variants += k not in cache.entries
            cache.entries.setdefault(k, v)
        _merge_notes(cache.device_notes, g.get("notes") or {})
    return {"variants": variants, "seconds": round(time.perf_counter() - t0, 2),
            "shares": [g["seconds"] for g in got]}


def _merge_notes(mine: dict, theirs: dict):
    """Device notes (Device.build_notes) of another worker's build merged into `mine`: per note, per kind of
    convolution, the union of the plans known not to build."""
    for note, fams in theirs.items():
        have = mine.setdefault(note, {})
        for fam, v in (fams or {}).items() if isinstance(fams, dict) else ():
            if fam in have and isinstance(v, dict) and isinstance(have[fam], dict):
                have[fam] = {**v, "failed": sorted(set(have[fam].get("failed", [])) | set(v.get("failed", []))),
                             "built": max(have[fam].get("built", 0), v.get("built", 0)),
                             "failures": max(have[fam].get("failures", 0), v.get("failures", 0))}
            else:
                have[fam] = v


def beside_base(ex, shared, seeded: int):
    """The workers (slots) that may rank the layers and run the all-higher probe while this process makes its
    base build, or None. Only GPU workers, and only where their load cannot skew the base build's tactic timing:
    any of them when the base build times nothing of its own (its timings came from the workers' shares, or a
    --timing-cache file holds them), else those on another GPU than this process's. CPU workers share this
    machine's cores with the base build's timing: there the ranking waits for it."""
    if ex.workers < 2 or not ex.own_gpus:
        return None
    if shared is not None or seeded > 0:
        return list(range(ex.workers))
    return ex.off_caller_gpu() or None


class BaseOverlap:
    """What a worker does while the search process makes its base build: ("probe", layers) runs the probe
    (returns (record, seconds), as the Prober's timed probes do) and ("rank", labels) a share of the ranking
    (LayerAloneChunk). Neither needs the base build: the all-higher engine replays no base tactic, and a layer
    alone is fed FP32 values."""

    def __init__(self, probe: PrecisionProbe, alone: LayerAloneProbe):
        from debugkit.debug.strategies import _Timed
        self.probe, self.alone = _Timed(probe), alone

    def __call__(self, item):
        kind, x = item
        return self.probe(x) if kind == "probe" else self.alone.many(x)


class LayerAloneChunk:
    """A worker's share of the ranking: the alone errors of a list of layers from one engine (`many`), so N
    workers build N engines instead of one per layer."""

    def __init__(self, probe: LayerAloneProbe):
        self.probe = probe

    def __call__(self, labels) -> list:
        return self.probe.many(labels)


def _engine_run(model, feeds, config) -> dict:
    """Build `model` (an ONNX ModelProto) at the feeds' shapes and run it once on them: the engine is made from the
    built graph (no plan bytes written and read back, no source-model hash), as a probe's is."""
    from backends.engine import Runtime
    from backends.engine.build import parse_onnx, profile_from_shapes
    from backends.engine.builder import Builder
    net, _ = parse_onnx(model)
    profile = profile_from_shapes(net, {k: tuple(np.shape(v)) for k, v in feeds.items()}, None)
    if profile is not None and not config.profiles:
        config.add_optimization_profile(profile)
    graph = Builder().build_graph(net, config)
    context = Runtime().engine_from_graph(graph, config).create_execution_context()
    return context.execute({k: np.asarray(v) for k, v in feeds.items()})


def candidate_layers(sub: Subgraphs) -> list:
    """ONNX nodes that compute float values from at least one non-constant input, in topological order."""
    from debugkit.surgeon.graphutil import node_reads
    consts = set(sub.inits) | set(sub.const_producer)
    out = []
    for lab in sub.items:
        n = sub.by_label[lab]
        if not any(o in sub.values and np.asarray(sub.values[o]).dtype.kind == "f" for o in n.output):
            continue
        if all(t in consts for t in node_reads(n)):
            continue
        out.append(lab)
    return out


def sensitivity(sub: Subgraphs, layers, low_values: dict, alone: dict) -> list:
    """[{layer, alone, added, full, score}] sorted most sensitive first (ties: topological order).

    alone: error of the layer's output when it alone runs in low precision on FP32 inputs. added: the error it adds
    in the full low-precision engine (its output's error minus the largest error among its inputs; tensors inside a
    fused layer are not observable and count 0). score: the larger of the two (inf for a non-finite output).
    """
    from debugkit.surgeon.graphutil import node_reads
    err = {t: _rel_err(v, sub.values[t]) for t, v in low_values.items() if t in sub.values}
    producer = {o: n for n in sub.nodes for o in n.output if o}
    upstream: dict = {}

    def upstream_err(t, depth=0):
        """A tensor's error, or (inside a fused layer, not observable) the largest error of what it is made from."""
        if t in err:
            return err[t]
        if t in upstream:
            return upstream[t]
        p = producer.get(t)
        upstream[t] = 0.0
        if p is not None and depth < 200:
            upstream[t] = max([upstream_err(x, depth + 1) for x in node_reads(p)] or [0.0])
        return upstream[t]

    rows = []
    for i, lab in enumerate(layers):
        n = sub.by_label[lab]
        outs = [err[o] for o in n.output if o in err]
        ins = [upstream_err(t) for t in node_reads(n)]
        full = max(outs) if outs else None
        if full is None:
            added = 0.0
        elif math.isinf(full):
            added = 0.0 if ins and math.isinf(max(ins)) else math.inf
        else:
            added = max(0.0, full - (max(ins) if ins else 0.0))
        a = float(alone.get(lab, 0.0))
        rows.append({"layer": lab, "order": i, "alone": a, "added": added, "full": full, "score": max(a, added)})
    rows.sort(key=lambda r: (-r["score"], r["order"]))
    return rows


OVERFLOW_GUESS_LIMIT = 8   # the most overflowing layers the search guesses as its answer


def overflow_guess(rows, limit: int = OVERFLOW_GUESS_LIMIT) -> list:
    """The layers whose low-precision output is not finite alone or in the engine (score inf) when they are a few
    (1..limit) of a ranking that also has finite ones: the likely answer, which the search confirms with |guess| + 1
    independent probes (strategies.confirm_minimal) before it peels the ranking one layer per round."""
    inf = [r["layer"] for r in rows if isinstance(r.get("score"), float) and math.isinf(r["score"])]
    return inf if 0 < len(inf) <= limit and len(inf) < len(rows) else []


def probe_costs(history) -> dict:
    """Build and run seconds per probe (medians and sums over the probes that report them) from a Prober's
    history; {} when none does (e.g. an external --check command)."""
    builds = [r["result"]["build_s"] for r in history if isinstance(r.get("result"), dict) and "build_s" in r["result"]]
    runs = [r["result"]["run_s"] for r in history if isinstance(r.get("result"), dict) and "run_s" in r["result"]]
    if not builds:
        return {}
    return {"probe_build_s_median": round(float(np.median(builds)), 3), "probe_run_s_median": round(
        float(np.median(runs)), 4), "build_s_total": round(float(sum(builds)), 2), "run_s_total": round(
        float(sum(runs)), 2)}


def build_bound(n_layers: int, k: int = 2) -> int:
    """The issue's budget for a k-layer answer: 2·k·log2(L) + 6 builds."""
    return int(2 * k * math.log2(max(n_layers, 2)) + 6)
