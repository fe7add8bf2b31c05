"""Convolution through cuDNN's graph API (the `nvidia-cudnn-frontend` Python package): one cuDNN graph per layer
signature (shapes, types, geometry, epilogue), conv_fprop with the layer's bias, residual add and activation fused
into the same graph, so cuDNN's runtime-fusion engines run conv + epilogue as one kernel.

Each of the graph's execution plans (heuristics mode A, in cuDNN's order) is a tactic of its own, `cudnn-plan-<i>`;
the builder times them with CUDA events like any other tactic. NCHW `Convolution` layers and the layout pass's
NHWC `ConvolutionNHWC` layers, FP32 (TF32 only when the layer's math says so), FP16 and BF16 (storage type for
I/O, weights and bias; FP32 accumulation and epilogue, rounded once on store: the CPU's BF16 convolution)."""
from __future__ import annotations

import atexit
import threading
import time

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import has_library, missing
from native.cuda.diagnostics import captured_stderr, summary
from native.cuda.driver import CudaError, context
from native.cuda.tactics.common import (FLOAT_STORAGE, on_device, out_array, same_float, storage,
                                        weight)
from native.cuda.tactics.epilogue import epilogue
from native.shared.conv_geometry import geometry
from native.tactics import Tactic, TacticRefusal, register_variants

PLANS = 4                       # tactics per layer: the first PLANS execution plans of heuristics mode A
_ACTS = {"RELU": "relu", "SIGMOID": "sigmoid", "TANH": "tanh", "GELU_ERF": "gelu", "SILU": "swish",
         "LEAKY_RELU": "leaky_relu", "CLIP": "clip"}
_LOCK = threading.Lock()
_GRAPHS: dict = {}
_HANDLE: dict = {}
_DECIDED: dict = {}             # graph key -> "" (cuDNN has a graph for it) or why not: the build-time answer
# What builds learnt per kind of convolution (repr(family()): what a plan's support depends on, not the spatial
# sizes): _FAILED {family: {plan name}} that failed to build, _BUILT / _BUILT_AT {family: {plan name} / {rank}} that
# built, _FAMILY {family: [graphs that built a plan, graphs whose every ranked plan failed]}. A plan build costs a
# runtime compile (~0.05-0.3 s on an H200): strict FP32 conv + bias + SiLU graphs on Hopper walked ~12 ranked
# configs at ~0.17 s each for every one of yolov8n's 47 signatures (100 of its 108 s cold build).
_FAILED: dict = {}
_FAMILY: dict = {}
_BUILT: dict = {}
_BUILT_AT: dict = {}
# What runtime-compiled plans (cuDNN's RUNTIME_COMPILATION behaviour note: its runtime-fusion engines generate and
# compile a kernel for each graph, i.e. each size) cost per kind of convolution in this build: {family: [builds,
# seconds]} (built or failed). On an H200 an FP16 conv + bias + SiLU plan compiles in ~0.05-0.4 s, a strict-FP32
# one (no tensor cores) in ~1.5 s and some configs far longer: yolov8n's 47 strict-FP32 NHWC signatures cost ~100 s
# of its cold build for one plan each. See slow_compiles().
_COMPILES: dict = {}
# A kind whose runtime-compiled plans took SLOW_COMPILE_SECONDS or more each (on average, over at least
# SLOW_COMPILE_BUILDS builds, or one build of SLOW_BUILD_SECONDS) builds no more of them in this build, and is not
# offered them for any of its convolutions (those that measured included, so a warm build that builds none makes
# the same choices): its layers run on cuDNN's precompiled configs, where it has some, or on another tactic.
SLOW_COMPILE_SECONDS = 0.6
SLOW_COMPILE_BUILDS = 2
SLOW_BUILD_SECONDS = 4.0
# Plans past the first (cudnn-plan-1.., timed by tactic selection for a few percent) are built for a runtime-
# compiled kind only while its compiles average under this: each is another compile per size (yolov8n's FP16
# conv + bias + SiLU: 0.13-0.15 s each on an H200, 3 more per convolution would add ~18 s to its cold build).
EXTRA_PLAN_COMPILE_SECONDS = 0.1
# A compile class's cost is settled after this many compiles (and when a timing cache's notes give it): what it
# decides (slow, extra plans) then holds for the rest of the build, and a warm build decides as the cold one ended,
# not by where its own compiles move the average.
SETTLE_BUILDS = 4
_SETTLED: set = set()
# Every plan build of this process (a build's `--breakdown` lists the slowest): (family, cuDNN's index, name,
# runtime-compiled (None: unknown), seconds, built), at most BUILD_LOG_MAX of them.
BUILD_LOG: list = []
BUILD_LOG_MAX = 4000
# What earlier builds on this device learnt per graph signature (the timing cache's notes: graph_notes()): {repr(
# graph key): (why cuDNN declined the graph, or "", [(name, runtime-compiled) of each plan that built, in plan
# order])}. A warm build answers supports() from it without building the graph (cuDNN's heuristics and support
# check, ~10-50 ms a signature: yolov8n FP16 asks 88, ssdlite 218); a question it cannot answer builds the graph.
_REMEMBERED: dict = {}
_clock = time.perf_counter     # what plan builds are timed with (the tests' fake cuDNN advances a fake one)
# A kind of convolution none of whose first FAMILY_FAILURES graphs built a plan is not tried further: its layers
# run on another tactic.
FAMILY_FAILURES = 4
# Those bounds hold while a build runs (Device.begin_build .. end_build): a plan is then chosen by what built. A
# loaded engine's run walks cuDNN's ranked list as it is, past failures, so the plan a build timed is found even
# where this process never learnt what the build skipped.
_BOUNDED = False
# A build refused as deselected in less than this is the note filters' refusal before any compile (microseconds);
# one that took longer compiled first (the frontend checks deselected engine names after building) and counts.
DESELECT_SECONDS = 0.01


def bound_builds(on: bool) -> None:
    """Apply the build-time bounds on plan builds (on while a build runs; see FAMILY_FAILURES)."""
    global _BOUNDED
    _BOUNDED = bool(on)


def available() -> bool:
    return has_library("cudnn")


def handle():
    ctx = context()
    h = _HANDLE.get(id(ctx))
    if h is None:
        import cudnn
        if not _HANDLE:
            atexit.register(release)   # process-wide, once: frontend objects go before the interpreter tears down
        h = cudnn.create_handle()
        cudnn.set_stream(handle=h, stream=int(ctx.stream))
        _HANDLE[id(ctx)] = h
    return h


_RELEASERS: list = []


def on_release(fn):
    """Have release() call `fn` first: a module whose cuDNN graphs use these handles drops them with it."""
    _RELEASERS.append(fn)


def release():
    """Drop every cuDNN graph, decision and handle this process made, then typing's caches (they keep the
    frontend's annotated nanobind functions and types alive). Registered with atexit at the first handle: without
    it the objects outlive the frontend's module at interpreter exit and nanobind prints dozens of "leaked
    instances / types / functions" lines on stderr. Safe to call any time (the next conv builds afresh)."""
    import gc
    for fn in _RELEASERS:    # other users of these handles (attention.py's SDPA graphs) drop theirs first
        fn()
    with _LOCK:
        _GRAPHS.clear()
        _DECIDED.clear()
        _FAILED.clear()
        _FAMILY.clear()
        _BUILT.clear()
        _BUILT_AT.clear()
        _COMPILES.clear()
        _SETTLED.clear()
        _REMEMBERED.clear()
        handles = list(_HANDLE.values())
        _HANDLE.clear()
    try:
        import cudnn
        for h in handles:
            try:
                cudnn.destroy_handle(h)
            except Exception:
                pass
    except Exception:
        pass
    del handles
    import typing
    for cleanup in getattr(typing, "_cleanups", ()):   # typing's lru caches (Python's own atexit-safe API)
        try:
            cleanup()
        except Exception:
            pass
    gc.collect()


def _cudnn_type(dtype):
    import cudnn
    return {"float32": cudnn.data_type.FLOAT, "float16": cudnn.data_type.HALF,
            "bfloat16": cudnn.data_type.BFLOAT16}[np.dtype(dtype).name]


def _strides(shape, nhwc):
    n, c, h, w = shape
    return [c * h * w, 1, w * c, c] if nhwc else [c * h * w, h * w, w, 1]


class ConvGraph:
    """One built cuDNN graph: tensors by role, execution plans built on demand."""

    def __init__(self, key, x_shape, w_shape, y_shape, dtype, geometry, steps, nhwc, tf32):
        import cudnn
        strides, dil, pre, post = geometry
        io = _cudnn_type(dtype)
        self.g = g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                                   compute_data_type=cudnn.data_type.FLOAT, handle=handle())
        self.x = g.tensor(name="x", dim=list(x_shape), stride=_strides(x_shape, nhwc), data_type=io)
        self.w = g.tensor(name="w", dim=list(w_shape), stride=_strides(w_shape, nhwc), data_type=io)
        y = g.conv_fprop(image=self.x, weight=self.w, pre_padding=list(pre), post_padding=list(post),
                         stride=list(strides), dilation=list(dil), compute_data_type=cudnn.data_type.FLOAT)
        self.extra = []       # (tensor, role) in the order run() binds them
        for step in steps:
            kind = step[0]
            if kind == "bias":
                b = g.tensor(name="b", dim=[1, y_shape[1], 1, 1], stride=[y_shape[1], 1, y_shape[1], y_shape[1]],
                             data_type=io)
                self.extra.append((b, step))
                y = g.bias(input=y, bias=b)
            elif kind == "add":
                r = g.tensor(name=f"r{len(self.extra)}", dim=list(y_shape), stride=_strides(y_shape, nhwc),
                             data_type=io)
                self.extra.append((r, step))
                y = g.add(a=y, b=r)
            elif kind == "act":
                _, t, alpha, beta = step
                if t == "RELU":
                    y = g.relu(input=y)
                elif t == "LEAKY_RELU":
                    y = g.relu(input=y, negative_slope=float(alpha))
                elif t == "CLIP":
                    y = g.relu(input=y, lower_clip=float(alpha), upper_clip=float(beta))
                else:
                    y = getattr(g, _ACTS[t])(input=y)
        y.set_output(True)
        y.set_data_type(io)
        y.set_dim(list(y_shape))
        y.set_stride(_strides(y_shape, nhwc))
        self.y = y
        g.validate()
        g.build_operation_graph()
        if np.dtype(dtype) == np.float32 and not tf32:   # FP32 means FP32: no TF32 down-conversion
            g.deselect_numeric_notes([cudnn.numerical_note.DOWN_CONVERT_INPUTS, cudnn.numerical_note.TENSOR_CORE])
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        self.count = g.get_execution_plan_count()
        self.good = []        # cuDNN's plan indices that built, in rank order: plan i of the tactics is good[i]
        self.tried = 0        # ranked configs walked (built, failed, deselected or skipped)
        self.skipped = 0      # configs not built: they failed for this graph's family before
        self.order = None     # the order configs are tried in (_order)
        self.last_failure = ""    # the first failed build's message (said when no plan built)
        self.counted = False  # whether this graph's finished walk counted for its family (_FAMILY)
        self.built = self.failed = 0            # real plan builds: succeeded / failed
        self.seconds = [0.0, 0.0]               # their seconds (built, failed): tools/build_times.py reads them
        self.workspace = {}
        self.held = 0         # configs passed over for their compile cost (_held)
        self._compiles = {}   # config -> whether it compiles a kernel when built (compiles())
        self._named = {}      # config name -> (index, workspace) or None (plan_named)
        self.key = key

    def may_have(self, index: int) -> str:
        """"" when this graph may have a plan `index` (built, or configs left to build), else why not; builds
        nothing. Plans are built when the tactic first runs (plan()), so asking a tactic builds nothing and a
        probe that times only plan 0 builds only plan 0."""
        if index < len(self.good):
            return self._withheld_why(self.good[index]) if _BOUNDED else ""
        why = given_up(self.key)
        if why and not self.good:
            return why
        if len(self.good) + self._left(len(self.good) > 0 or index > 0) <= index:
            return self._why(index)
        return ""

    def unbuilt(self, index: int) -> bool:
        """Whether plan(index) still has plans to build (the first run of this tactic on this graph)."""
        return len(self.good) <= index and self.tried < self.count

    def _order(self, bounded):
        """The order the ranked configs are tried in: in a build, first those that built for a convolution of the
        same family (by name, or at the same rank when cuDNN names them apart), each in cuDNN's order, then the
        rest; a loaded engine: cuDNN's order."""
        if self.order is None:
            order = list(range(self.count))
            if bounded:
                fam = repr(family(self.key))
                built, at = _BUILT.get(fam, set()), _BUILT_AT.get(fam, set())
                names = [self._name(j) for j in order]
                order.sort(key=lambda j: (0 if (names[j] is not None and names[j] in built) or j in at else 1, j))
            self.order = order
        return self.order

    def compiles(self, j):
        """Whether cuDNN's config j compiles a kernel when built (its RUNTIME_COMPILATION behaviour note: the
        runtime-fusion engines), asked without building it; None when the frontend does not say."""
        hit = self._compiles.get(j, 0)
        if hit == 0:
            try:
                notes = self.g.get_behavior_notes_for_plan_at_index(j)
                hit = any("RUNTIME_COMPILATION" in str(n) for n in notes)
            except Exception:
                hit = None
            self._compiles[j] = hit
        return hit

    def _held(self, j, extra: bool) -> bool:
        """Whether a build passes config j over unbuilt for its compile cost: a runtime-compiled config of a kind
        whose compiles are slow (slow_compiles()), or past the first plan where they are not cheap (`extra`)."""
        if self.compiles(j) is False:
            return False
        cls = compile_class(self.key)
        return bool(slow_compiles(cls)) or (extra and compile_seconds(cls) > EXTRA_PLAN_COMPILE_SECONDS)

    def _left(self, extra: bool) -> int:
        """Ranked configs not tried yet that a build would still try (all of them outside a build)."""
        rest = self._order(_BOUNDED)[self.tried:]
        if not _BOUNDED:
            return len(rest)
        return sum(1 for j in rest if not self._held(j, extra))

    def _withheld_why(self, j) -> str:
        """Why built plan j is no longer offered in this build ("" when it is): its kind's compiles turned out
        slow after it built (every convolution of the kind is treated alike, as a warm build will)."""
        if self.compiles(j) is False:
            return ""
        return slow_compiles(compile_class(self.key))

    def plan(self, index: int):
        """The `index`-th plan that builds: (cuDNN's plan index, workspace bytes); TacticRefusal when there is none.
        In a build, configs that built for a convolution of the same family are tried first (a strict-FP32
        conv + bias + SiLU graph on Hopper fails ~a dozen ranked configs at ~0.2 s each before one builds: once a
        family has found it, its next graphs start there), ranked configs the note filters deselected and configs
        that failed to build for the family (and never built for it) are passed over unbuilt (see _FAILED), and a
        family none of whose first FAMILY_FAILURES graphs built a plan is given up. Runtime-compiled configs are
        passed over where their compiles are slow (slow_compiles()), and past the first plan where they are not
        cheap (EXTRA_PLAN_COMPILE_SECONDS). A loaded engine tries every ranked config in cuDNN's order until the
        `index`-th builds."""
        bounded = _BOUNDED
        fam = repr(family(self.key))
        cls = compile_class(self.key)
        failed, built = _FAILED.setdefault(fam, set()), _BUILT.setdefault(fam, set())
        at = _BUILT_AT.setdefault(fam, set())
        stats = _FAMILY.setdefault(fam, [0, 0])
        order = self._order(bounded)
        while len(self.good) <= index and self.tried < self.count:
            if bounded and not self.good and given_up(self.key):
                break
            j = order[self.tried]
            self.tried += 1
            name = self._name(j) if bounded else None
            if name is not None and name in failed and name not in built:
                self.skipped += 1
                continue
            if bounded and self._held(j, len(self.good) > 0 or index > 0):
                self.held += 1
                continue
            t0 = _clock()
            try:
                self.g.build_plan_at_index(j)
                self.workspace[j] = int(self.g.get_workspace_size_plan_at_index(j))
            except Exception as e:
                dt = _clock() - t0
                if _deselected(e) and dt < DESELECT_SECONDS:
                    continue      # a plan the note filters deselect: refused before any compile, no cost
                self.failed += 1
                self.seconds[1] += dt
                self._count(cls, fam, j, name, dt, False)
                if name is not None and name not in built:   # (one that built for another size is tried)
                    failed.add(name)
                if not self.last_failure:
                    self.last_failure = (f"cuDNN plan {j} ({name or '?'}) failed to build: "
                                         f"{str(e).splitlines()[0][:200] if str(e) else type(e).__name__}")
                continue
            dt = _clock() - t0
            self.built += 1
            self.seconds[0] += dt
            self._count(cls, fam, j, name, dt, True)
            self.good.append(j)
            at.add(j)
            if name is not None:
                built.add(name)
        if self.tried >= self.count and not self.counted:     # this graph's walk is over: count it for the kind
            self.counted = True
            stats[0 if self.good else 1] += 1
        if index >= len(self.good):
            raise TacticRefusal(self._why(index))
        j = self.good[index]
        if bounded:
            why = self._withheld_why(j)
            if why:
                raise TacticRefusal(why)
        return j, self.workspace[j]

    def _count(self, cls, fam, j, name, seconds, ok):
        """Record one real plan build: its compile cost for the kind (runtime-compiled configs), the build log."""
        compiles = self.compiles(j)
        if compiles is not False and cls not in _SETTLED:
            c = _COMPILES.setdefault(cls, [0, 0.0, 0.0])
            c[0] += 1
            c[1] += seconds
            c[2] = max(c[2], seconds)
            if c[0] >= SETTLE_BUILDS:
                _SETTLED.add(cls)
        if len(BUILD_LOG) < BUILD_LOG_MAX:
            BUILD_LOG.append((fam, j, name if name is not None else self._name(j), compiles, round(seconds, 4), ok))

    def _why(self, index) -> str:
        left = self._left(len(self.good) > 0 or index > 0)
        held = self.held + (self.count - self.tried - left)      # passed over for their compile cost, or to be
        why = f"cuDNN has {len(self.good) + left} usable execution plan(s) for this convolution"
        if self.skipped:
            why += f" ({self.skipped} skipped: they failed to build for a convolution of the same kind)"
        if held:
            slow = slow_compiles(compile_class(self.key))
            why += (f" ({held} runtime-compiled not built: {slow})" if slow else
                    f" ({held} runtime-compiled not built past the first plan: this kind's compiles take "
                    f"{compile_seconds(compile_class(self.key)):.2f} s each here, over "
                    f"EXTRA_PLAN_COMPILE_SECONDS {EXTRA_PLAN_COMPILE_SECONDS:g} s)")
        if self.last_failure and not self.good:
            why += f" (first failure: {self.last_failure})"
        return why

    def _name(self, j):
        """cuDNN's name of plan j (engine and knobs), None when it has none to give."""
        try:
            return str(self.g.get_plan_name_at_index(j))
        except Exception:
            return None

    def plan_named(self, name: str):
        """(cuDNN's plan index, workspace bytes) of the config called `name` (what a build chose: Op.config), built
        on first use; None when this graph offers none of that name or it does not build here (the caller then
        walks the ranked list: plan())."""
        hit = self._named.get(name, 0)
        if hit == 0:
            hit = None
            j = next((k for k in range(self.count) if self._name(k) == name), None)
            if j is not None:
                try:
                    if j not in self.workspace:
                        self.g.build_plan_at_index(j)
                        self.workspace[j] = int(self.g.get_workspace_size_plan_at_index(j))
                    hit = (j, self.workspace[j])
                except Exception:
                    pass      # not built here: the caller walks the ranked list
            self._named[name] = hit
        return hit

    def execute(self, index, x, w, extras, y, config=""):
        named = self.plan_named(config) if config and not _BOUNDED else None
        index, ws_size = named or self.plan(index)
        ws = GpuArray((max(ws_size, 1),), np.uint8) if ws_size else None
        pack = {self.x: x.ptr, self.w: w.ptr, self.y: y.ptr}
        for (t, _), v in zip(self.extra, extras):
            pack[t] = v.ptr
        self.g.execute_plan_at_index(pack, ws.ptr if ws is not None else 0, index, handle=handle())


def given_up(key) -> str:
    """Why convolutions of this graph's kind get no cuDNN plan in this build ("" when they may): the first
    FAMILY_FAILURES convolutions of the kind built no plan of all cuDNN ranked for them, and none built one (in this
    build or in the earlier ones its timing cache remembers)."""
    stats = _FAMILY.get(repr(family(key)))
    if not _BOUNDED or not stats or stats[0] or stats[1] < FAMILY_FAILURES:
        return ""
    return (f"cuDNN has 0 usable execution plan(s) for this convolution (given up: none of the plans cuDNN ranked "
            f"for {stats[1]} convolutions of this kind built)")


def compile_class(key) -> str:
    """What a runtime-compiled plan's compile cost depends on, as far as a build learns it: storage type, layout,
    math and the fused steps (not the window or the sizes; a strict-FP32 kernel compiles slowly at every size)."""
    x_nchw, w_nchw, dtype, geo, steps, nhwc, tf32 = key
    return repr((dtype, nhwc, tf32, tuple(steps)))


def compile_seconds(cls) -> float:
    """The average seconds of this compile class's runtime-compiled plan builds in this build (0 when none)."""
    c = _COMPILES.get(cls)
    return c[1] / c[0] if c and c[0] else 0.0


def slow_compiles(cls) -> str:
    """Why this compile class's runtime-compiled plans are not built any more in this build ("" while they are):
    they took SLOW_COMPILE_SECONDS or more each (see _COMPILES)."""
    c = _COMPILES.get(cls)
    if not _BOUNDED or not c or not c[0]:
        return ""
    avg = c[1] / c[0]
    if not ((c[0] >= SLOW_COMPILE_BUILDS and avg >= SLOW_COMPILE_SECONDS) or c[2] >= SLOW_BUILD_SECONDS):
        return ""
    return (f"cuDNN's runtime-compiled plans for this kind of convolution are not built in this build: its first "
            f"{c[0]} took {avg:.2f} s each (a kernel compile per size; SLOW_COMPILE_SECONDS "
            f"{SLOW_COMPILE_SECONDS:g} s); its precompiled configs and the other tactics are timed instead")


def _deselected(e) -> bool:
    """Whether a plan build failed because the note filters (or deselect_engines) exclude the config: no compile."""
    text = str(e)
    return "Deselecting execution plan" in text or "excluded by deselect_engines()" in text


def family(key) -> tuple:
    """What a convolution graph's plan support depends on, without the sizes: storage type, layout, math, fused
    steps, kernel window, grouping, and the channel counts' alignment (largest power of two up to 8 dividing each)."""
    x_nchw, w_nchw, dtype, geo, steps, nhwc, tf32 = key
    align = tuple(next(a for a in (8, 4, 2, 1) if int(c) % a == 0) for c in (x_nchw[1], w_nchw[0]))
    groups = 1 if int(x_nchw[1]) == int(w_nchw[1]) else "depthwise" if int(w_nchw[1]) == 1 else "grouped"
    return dtype, nhwc, tf32, tuple(steps), tuple(w_nchw[2:]), groups, align


def failed_plans() -> dict:
    """What this process learnt about plans that do not build, per kind of convolution (JSON-able): the timing
    cache keeps it (Device.build_notes), so a warm build does not build them again either."""
    return {fam: {"failed": sorted(_FAILED.get(fam, ())), "built": built, "failures": failures}
            for fam, (built, failures) in _FAMILY.items() if failures}


def remember_failed_plans(notes) -> int:
    """Take failed_plans() of an earlier build on this device (from its timing cache); malformed entries are
    skipped. Returns how many kinds of convolution it named."""
    n = 0
    for fam, v in (notes or {}).items() if isinstance(notes, dict) else ():
        if not (isinstance(v, dict) and isinstance(v.get("failed"), list) and
                all(isinstance(x, str) for x in v["failed"]) and
                all(isinstance(v.get(k), int) and not isinstance(v.get(k), bool) and v[k] >= 0
                    for k in ("built", "failures"))):
            continue
        _FAILED.setdefault(fam, set()).update(v["failed"])
        stats = _FAMILY.setdefault(fam, [0, 0])
        stats[0], stats[1] = max(stats[0], v["built"]), max(stats[1], v["failures"])
        n += 1
    return n


def compile_costs() -> dict:
    """What runtime-compiled plan builds cost per compile class in this process ({class: [builds, seconds,
    longest]}, JSON-able): the timing cache keeps it (Device.build_notes), so a warm build holds back the same
    plans the cold one did (slow_compiles, EXTRA_PLAN_COMPILE_SECONDS) instead of compiling them to find out."""
    return {cls: [int(n), round(float(s), 4), round(float(mx), 4)] for cls, (n, s, mx) in _COMPILES.items() if n}


def remember_compile_costs(notes) -> int:
    """Take compile_costs() of an earlier build on this device (from its timing cache); malformed entries are
    skipped. Returns how many compile classes it named."""
    n = 0
    for cls, v in (notes or {}).items() if isinstance(notes, dict) else ():
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                            and x >= 0 for x in v) and isinstance(v[0], int)):
            continue
        c = _COMPILES.setdefault(cls, [0, 0.0, 0.0])
        if v[0] > c[0]:      # the better-informed of the two (a rebuild with the cache it wrote adds nothing new)
            c[0], c[1], c[2] = v[0], float(v[1]), max(c[2], float(v[2]))
        _SETTLED.add(cls)
        n += 1
    return n


def graph_notes() -> dict:
    """What this process learnt per graph signature ({repr(key): [why cuDNN declined it or "", [[plan name,
    runtime-compiled] of each plan that built], why no further plan would be offered or ""]}, JSON-able): the
    timing cache keeps it (Device.build_notes), so a warm build builds no graph to answer what the cold one asked
    (_REMEMBERED). Signatures remembered and not rebuilt here are kept as they were."""
    global _BOUNDED
    out = {k: [why, [list(p) for p in good], beyond] for k, (why, good, beyond) in _REMEMBERED.items()}
    was, _BOUNDED = _BOUNDED, True      # the answers a build gives (read after the build has ended)
    try:
        for key, why in list(_DECIDED.items()):
            g = _GRAPHS.get(key)
            if why or g is None:
                out[repr(key)] = [why, [], ""]
                continue
            out[repr(key)] = ["", [[g._name(j) or "", g.compiles(j)] for j in g.good], g.may_have(len(g.good))]
    finally:
        _BOUNDED = was
    return out


def remember_graphs(notes) -> int:
    """Take graph_notes() of an earlier build on this device (from its timing cache); malformed entries are
    skipped. Returns how many signatures it named."""
    n = 0
    for k, v in (notes or {}).items() if isinstance(notes, dict) else ():
        if not (isinstance(k, str) and isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and
                isinstance(v[2], str) and isinstance(v[1], list) and
                all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and
                    (p[1] is None or isinstance(p[1], bool)) for p in v[1])):
            continue
        _REMEMBERED[k] = (v[0], [tuple(p) for p in v[1]], v[2])
        n += 1
    return n


def _graph(key, *args):
    with _LOCK:
        g = _GRAPHS.get(key)
        if g is None:
            g = _GRAPHS[key] = ConvGraph(key, *args)
        return g


class _CudnnConv(Tactic):
    device = "cuda"
    precisions = ("float32", "float16", "bfloat16")
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    honours = {"post_ops"}
    writes_outputs = True   # outputs through out_array: the engine's arena views
    index = 0
    nhwc = False

    def supports(self, op, input_shapes):
        if not available():
            return missing("cudnn")
        w = op.weights.get(self.kernel_key)
        if w is None:
            return "kernel given as a tensor runs on another tactic"
        if not self.nhwc and np.ndim(w) != 4:
            return "only 2-D convolutions run on cuDNN here"
        from native.cuda.tactics.pointwise import _ACT
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACTS and step["type"] not in _ACT:
                return f"fused activation {step['type']} has neither a cuDNN pointwise mode nor a GPU kernel"
            if step["op"] not in ("bias", "add", "activation"):
                return f"post-op {step['op']} has no cuDNN graph node"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "only 4-D inputs"
        if input_shapes and input_shapes[0] is not None:
            # the build decides: cuDNN is asked now (graph built with its heuristics and support check, cached per
            # signature) whether it runs this layer as the runtime will hand it over (at the opt shapes, and at the
            # profile's min and max shapes where the context has them); the plan itself is built by the builder's
            # runs, which pass over one that fails to build
            dtypes = getattr(input_shapes, "dtypes", None)
            for shapes in (list(input_shapes), getattr(input_shapes, "min_shapes", None),
                           getattr(input_shapes, "max_shapes", None)):
                if not shapes or shapes[0] is None:
                    continue
                try:
                    why = self._decide(op, *self._signature(op, list(shapes), dtypes))
                except TacticRefusal as e:
                    why = str(e)
                if why:
                    return why if shapes is not None and list(shapes) == list(input_shapes) else \
                        f"{why} (at the profile's input shapes {list(shapes)})"
        return None

    def config(self, op, input_shapes):
        """cuDNN's name of the engine config this tactic's plan is for these inputs (the build has built it)."""
        if not input_shapes or input_shapes[0] is None:
            return ""
        try:
            key = self._signature(op, list(input_shapes), getattr(input_shapes, "dtypes", None))[0]
        except TacticRefusal:
            return ""
        g = _GRAPHS.get(key)
        if g is None:
            good = (_REMEMBERED.get(repr(key)) or ("", [], ""))[1]
            return (good[self.index][0] or "") if self.index < len(good) else ""
        if self.index >= len(g.good):
            return ""
        return g._name(g.good[self.index]) or ""

    def ready(self, op, input_shapes):
        """Whether this tactic's plan for these inputs is built (a first run otherwise builds it: a kernel compile
        on cuDNN's runtime-fusion engines)."""
        if not input_shapes or input_shapes[0] is None:
            return True
        try:
            key = self._signature(op, list(input_shapes), getattr(input_shapes, "dtypes", None))[0]
        except TacticRefusal:
            return True
        g = _GRAPHS.get(key)
        return g is not None and not g.unbuilt(self.index)

    def prepare(self, op):
        """The kernel in the layer's storage type and cuDNN's layout (KCRS for NCHW, KRSC for NHWC)."""
        out = dict(op.weights)
        dtype = storage(op)
        w = np.asarray(op.weights[self.kernel_key], np.float32)
        if self.nhwc:     # [KH*KW*C, M] -> [M, KH, KW, C]
            kh, kw = op.params["kernel_spatial"]
            w = w.reshape(kh, kw, -1, w.shape[-1]).transpose(3, 0, 1, 2)
        out["cudnn_kernel"] = np.ascontiguousarray(w.astype(dtype))
        if "bias" in op.weights:
            out["cudnn_bias"] = np.asarray(op.weights["bias"], np.float32).astype(dtype)
        for st in op.params.get("post_ops") or ():
            if st["op"] == "bias":
                out["cudnn_" + st["weight"]] = np.asarray(op.weights[st["weight"]], np.float32).astype(dtype)
        return out

    def _kernel_shape(self, op):
        """The prepared kernel's shape (prepare(): [M, C/g, KH, KW] for NCHW, [M, KH, KW, C] for NHWC)."""
        if "cudnn_kernel" in op.weights:
            return tuple(op.weights["cudnn_kernel"].shape)
        w = np.shape(op.weights[self.kernel_key])
        if self.nhwc:
            kh, kw = op.params["kernel_spatial"]
            return (w[-1], kh, kw, int(np.prod(w[:-1])) // (kh * kw))
        return tuple(w)

    def _geometry(self, op, x_shape, k_shape):
        p = op.params
        if self.nhwc:
            strides = list(p.get("strides") or [1, 1])
            dil = list(p.get("dilations") or [1, 1])
            pre = list(p.get("pre_padding") or [0, 0])
            post = list(p.get("post_padding") or [0, 0])
            n, h, w, c = x_shape
            kh, kw = k_shape[1], k_shape[2]
            oh = (h + pre[0] + post[0] - (kh - 1) * dil[0] - 1) // strides[0] + 1
            ow = (w + pre[1] + post[1] - (kw - 1) * dil[1] - 1) // strides[1] + 1
            return (strides, dil, pre, post), (oh, ow)
        strides, dil, pre, post, out = geometry(p, x_shape, list(k_shape[2:]))
        return (list(strides), list(dil), list(pre), list(post)), tuple(out)

    def _signature(self, op, shapes, dtypes=None):
        """(graph key, ConvGraph arguments, where each extra operand comes from: ("weight", name) or ("input", i),
        output shape, tail post-ops run by our kernels) for inputs of these shapes and storage types (None where
        unknown: the layer's storage). The one description of the cuDNN graph a layer needs: supports() asks
        cuDNN about it at build time and run() executes it. TacticRefusal when the layer cannot be one."""
        dtypes = list(dtypes or [])
        dtype = np.dtype(storage(op))
        if dtypes and dtypes[0] is not None and np.dtype(dtypes[0]) != dtype:
            raise TacticRefusal(f"GPU kernel needs one float storage type, got {sorted({dtypes[0], dtype.name})}")
        x_shape = tuple(shapes[0])
        k_shape = self._kernel_shape(op)
        geo, (oh, ow) = self._geometry(op, x_shape, k_shape)
        if any(v < 0 for v in geo[2] + geo[3]):
            raise TacticRefusal("negative pads run on another tactic")
        m = k_shape[0]
        if self.nhwc:
            n, h, wd, c = x_shape
            x_nchw, y_shape, w_nchw = (n, c, h, wd), (n, oh, ow, m), (m, k_shape[3], k_shape[1], k_shape[2])
        else:
            x_nchw, y_shape, w_nchw = x_shape, (x_shape[0], m, oh, ow), k_shape
        y_nchw = (y_shape[0], m, oh, ow)
        steps, sources = [], []
        if "bias" in op.weights or "cudnn_bias" in op.weights:
            steps.append(("bias",))
            sources.append(("weight", "cudnn_bias"))
        elif len(shapes) > 2 and shapes[2] is not None:
            if len(dtypes) > 2 and dtypes[2] is not None and np.dtype(dtypes[2]) != dtype:
                raise TacticRefusal("bias tensor in another storage type")
            steps.append(("bias",))
            sources.append(("input", 2))
        post = list(op.params.get("post_ops") or ())
        tail = []      # from the first activation cuDNN cannot fuse on: our kernels, after the graph
        for i, st in enumerate(post):
            if st["op"] == "activation" and st["type"] not in _ACTS:
                post, tail = post[:i], post[i:]
                break
        for st in post:
            if st["op"] == "bias":
                steps.append(("bias",))
                sources.append(("weight", "cudnn_" + st["weight"]))
            elif st["op"] == "add":
                i = st["input"]
                r_shape = tuple(shapes[i]) if i < len(shapes) and shapes[i] is not None else tuple(y_shape)
                r_dtype = np.dtype(dtypes[i]) if i < len(dtypes) and dtypes[i] is not None else dtype
                if r_dtype != dtype or r_shape != tuple(y_shape):
                    raise TacticRefusal(f"residual {r_shape}/{r_dtype} does not match the output "
                                        f"{y_shape}/{dtype}")
                steps.append(("add",))
                sources.append(("input", i))
            else:
                steps.append(("act", st["type"], st.get("alpha", 0.0) or 0.0, st.get("beta", 0.0) or 0.0))
        tf32 = op.math == "tf32"
        key = (tuple(x_nchw), tuple(w_nchw), dtype.name, tuple(map(tuple, geo)), tuple(steps), self.nhwc, tf32)
        args = (x_nchw, w_nchw, y_nchw, dtype, geo, steps, self.nhwc, tf32)
        return key, args, sources, y_shape, tail

    def _decide(self, op, key, args, sources, y_shape, tail):
        """None when cuDNN builds this graph and may offer its plan `index`, else why not: the graph (cuDNN's
        heuristics and support check) is built once per signature and a graph cuDNN declines is remembered; no
        plan is built here. A plan is built when its tactic first runs (the builder's runs, timing): a cuDNN plan
        costs a kernel compile each, and a probe that times plan 0 of a variant needs none of the others. A plan
        that then fails to build refuses in run() (the build passes over it: executor.py, tactic_selection.py)
        and from then on here (ConvGraph.may_have)."""
        if 0 in y_shape:
            return None      # nothing to compute: run() returns the empty output
        known = _DECIDED.get(key)
        if known is None and _BOUNDED:
            remembered = _REMEMBERED.get(repr(key))
            if remembered is not None:
                why, good, beyond = remembered
                if why:
                    return why
                if self.index < len(good):     # a plan an earlier build built: offered as it would be
                    return (slow_compiles(compile_class(key)) if good[self.index][1] is not False else "") or None
                if beyond:                     # why that build would offer no plan past those
                    return beyond
        if known is None:
            gave_up = given_up(key)
            if gave_up:          # a kind given up in this build: not even the graph (cuDNN's heuristics) is built
                return gave_up
            try:
                self._build(op, key, args, plan=False)
                known = ""
            except TacticRefusal as e:
                known = str(e)
            _DECIDED[key] = known
        return (known or _GRAPHS[key].may_have(self.index)) or None

    def _build(self, op, key, args, plan=True):
        """Build the layer's cuDNN graph and (`plan`) this tactic's plan, once, with what cuDNN prints on stderr
        meanwhile captured and summarised in one verbose line (diagnostics.py); the executions after it capture
        nothing."""
        said = []
        try:
            with captured_stderr(said):
                try:
                    g = _graph(key, *args)
                except TacticRefusal:
                    raise
                except Exception as e:
                    raise TacticRefusal(f"cuDNN has no engine for this convolution graph: "
                                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
                if plan:
                    g.plan(self.index)     # TacticRefusal when cuDNN has no plan of this index
        finally:
            if said:
                report(op.name, self.name, said)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        if "cudnn_kernel" not in op.weights:
            op.weights = self.prepare(op)
        wh = op.weights["cudnn_kernel"]
        dtype = same_float([x], wh.dtype)
        w = weight(wh)
        key, args, sources, y_shape, tail = self._signature(
            op, [list(a.shape) if a is not None else None for a in inputs],
            [np.dtype(a.dtype).name if a is not None else None for a in inputs])
        extras = [weight(op.weights[name]) if where == "weight" else on_device(inputs[name])
                  for where, name in sources]
        y = out_array(outputs, 0, y_shape, dtype)
        if y.size == 0:
            return [y]
        g = _GRAPHS.get(key)
        named = bool(op.config) and not _BOUNDED     # a loaded engine: the config its build chose, by name
        if g is None or (g.unbuilt(self.index) and not named):
            # TacticRefusal when the plan does not build (may_have says so from now on)
            self._build(op, key, args, plan=not named)
            g = _GRAPHS[key]
        try:
            g.execute(self.index, x, w, extras, y, op.config if named else "")
        except TacticRefusal:
            raise
        except Exception as e:
            raise CudaError(f"cuDNN plan {self.index} failed: {e}") from e
        if tail:
            epilogue(y, op, inputs, tail)
        return [y]


_REPORTED: set = set()


def report(layer, tactic, lines):
    """One verbose line per layer and tactic for cuDNN's diagnostics (they are never printed raw)."""
    if (layer, tactic) in _REPORTED:
        return
    _REPORTED.add((layer, tactic))
    from native.logger import G_LOGGER
    G_LOGGER.verbose(f"layer '{layer}': {tactic}: cuDNN said {summary(lines)} while building its graph and plans")


for _nhwc, _kind, _key in ((False, "Convolution", "kernel"), (True, "ConvolutionNHWC", "kernel_hwio")):
    register_variants(_CudnnConv, PLANS, "cudnn-plan-{i}",
                      "cuDNN graph (conv + fused epilogue), execution plan {i} of heuristics mode A",
                      kind=_kind, nhwc=_nhwc, kernel_key=_key, formats=("nhwc",) if _nhwc else ("linear",))
