"""The interpreter: runs an engine Graph node by node on a device, freeing each intermediate after its last use.

The one loop that executes layers. The runtime, the builder's timing run, constant and shape folding and the
surgeon's evaluation all use it, so they execute the same code; the device runs each tactic
(`Device.run(tactic, op, inputs, outputs, workspace, stream)`). Strict by default (the first failing layer raises
an ExecutionError naming it); with `on_error` it is tolerant: the hook sees the failure, the layer's outputs stay
absent, and layers that read them are reported to the hook as skipped.
"""
from __future__ import annotations


import numpy as np

from backends.engine.engine_graph import node_format, node_op  # noqa: F401  (node_op: callers import it from here)
from backends.engine.runtime import arena, empty_batch
from backends.engine.runtime.compiled import CompiledPlan, profiled_call, with_subgraphs
from native.device import get_device
from native.errors import BuildError, DebugkitError, ExecutionError
from native.limits import check_size, default_limits
from native.logger import G_LOGGER
from native.tactic_modules import builtin_tactic
from native.tactics import LayerContext, TacticRefusal, accepting, tactic_by_id, tactics_for


def default_tactic(node, device="cpu"):
    """The first registered tactic that can run the node as it stands (what an untimed build picks)."""
    device = get_device(device)
    candidates = tactics_for(node.kind, device)
    shapes = node.meta.get("input_shapes")
    ok, _, reasons = accepting(candidates, node_op(node), shapes)
    if ok:   # (a precision no tactic computes falls back to float32, as tactic selection does)
        return ok[0]
    why = "; ".join(f"{k}: {v}" for k, v in reasons.items())
    raise BuildError(f"no {device} implementation for layer '{node.name}' (kind {node.kind}, ONNX nodes "
                     f"{node.source_nodes}){' (' + why + ')' if why else ''}; try another device "
                     f"or report the layer kind")


class Skipped(Exception):
    """Passed to `on_error` for a layer that was not run because a tensor it reads (args[0]) is missing."""

    @property
    def tensor(self):
        return self.args[0]


def _refusal(e) -> bool:
    """Whether `e` is a tactic refusing its inputs (raised bare, or wrapped by the device's bind)."""
    return isinstance(e, TacticRefusal) or isinstance(e.__cause__, TacticRefusal)


class GraphExecutor:
    """Executes one Graph on one device. `keep_all` returns every tensor (the builder's runs: timing, precision,
    layout, calibration). In those runs a layer whose tactic is not chosen yet runs the first candidate that accepts
    its real inputs (shapes, dtypes, which inputs are given) — the build decides with what the runtime will see, so a
    candidate that refuses is passed over here, and tactic selection then drops it (tactic_selection.py)."""

    def __init__(self, graph, device="cpu", keep_all: bool = False, lazy_tactics: bool = False,
                 record_bodies: bool = False, _body: bool = False, _in_build: bool = False):
        """record_bodies (the builder's timing run): If / Loop / Scan bodies keep every tensor too, and each body's
        executor holds its last run's tensors in `last_env`, so tactic selection can time the bodies' layers on
        real values (`body_envs`)."""
        self.graph = graph
        self.last_env = None
        self.device = get_device(device)
        self.steps = []
        self._calls, self._bound = [], None  # per step: (fn, full) from Device.bind, for the steps list `_bound`
        self.consts = {}  # Constant layers' outputs, bound once here instead of running a layer per execution
        self.workspace_bytes = 0
        for node in graph.nodes:
            if lazy_tactics:  # tolerant callers: a layer without a tactic fails when it runs, not here
                try:
                    tactic = self._tactic(node)
                except DebugkitError as e:
                    tactic = _Unavailable(e)
            else:
                tactic = self._tactic(node)
            if node.kind == "Constant" and tactic.name == "numpy" and not node.subgraphs:
                self.consts[node.outputs[0]] = node.weights["value"]
                continue
            if node.kind == "Constant" and tactic.constant:   # a device-resident constant
                self.consts[node.outputs[0]] = tactic.run(node_op(node), [])[0]
                continue
            sub_device = tactic.subgraph_device or self.device  # a DLA loadable's body runs on the DLA
            subs = {k: GraphExecutor(g, sub_device, keep_all=record_bodies, lazy_tactics=lazy_tactics,
                                     record_bodies=record_bodies, _body=True, _in_build=_in_build or keep_all)
                    for k, g in node.subgraphs.items()}
            op = node_op(node)
            if hasattr(tactic, "check_loadable") and not lazy_tactics:  # e.g. a plugin not registered here
                tactic.check_loadable(op)
            self.workspace_bytes = max(self.workspace_bytes, int(node.meta.get("workspace_bytes", 0) or 0))
            self.steps.append((node, tactic, op, subs))
        self.outer = graph.outer_references()
        self.keep_all = keep_all
        self._records = record_bodies
        # a body kept whole for the record runs its bound (default) tactics, as bodies always ran: the builder's
        # first-accepting search per layer would cost a Loop of many iterations that much per iteration
        self._search = keep_all and not _body
        # a body run inside the builder's runs: its unchosen layers run their bound tactic, and one that refuses
        # these inputs gives way to the next candidate that accepts them (once: the step keeps it), as in the
        # main graph; else a body layer's refusal would be its If / Loop's refusal, host twin included
        self._fallback = _body and _in_build
        self._last_use = self._compute_last_use()

    def _static_shapes(self, feeds) -> bool:
        """Whether these feeds have the shapes the build's timing run used (then every recorded shape is exact)."""
        first = self.steps[0][0].meta.get("input_shapes") if self.steps else None
        for t in self.graph.inputs:
            v = feeds.get(t.name)
            if v is not None and (t.shape is None or any(d < 0 for d in t.shape) or
                                  list(getattr(v, "shape", ())) != list(t.shape)):
                return False
        return first is not None

    def _check_outputs(self, node, tactic, outs, static):
        """Raise ExecutionError naming the tactic and the layer when a (user) tactic's outputs do not have the
        layer's declared count, dtype or shape (the rank always, every dim when the feeds have the built shapes):
        caught here, not blamed on the next layer that reads them."""
        where = f"tactic '{tactic.name}' of layer '{node.name}' ({node.kind}, ONNX nodes {list(node.source_nodes)})"
        if outs is None or len(outs) != len(node.outputs):
            raise ExecutionError(f"{where} returned {0 if outs is None else len(outs)} output(s); the layer has "
                                 f"{len(node.outputs)}")
        if node_format(node) != "linear":
            return
        shapes = node.meta.get("output_shapes") or [None] * len(outs)
        dtypes = node.meta.get("output_dtypes") or [None] * len(outs)
        for name, value, declared, want in zip(node.outputs, outs, shapes, dtypes):
            got_dtype = getattr(getattr(value, "dtype", None), "name", None)
            if want and got_dtype and got_dtype != want:
                raise ExecutionError(f"{where} returned '{name}' as {got_dtype}; the layer declares {want}")
            shape = getattr(value, "shape", None)
            if declared is None or shape is None:
                continue
            shape = list(shape)
            wrong = len(shape) != len(declared) or (static and any(d >= 0 and d != s for d, s in zip(declared, shape)))
            if wrong:
                raise ExecutionError(f"{where} returned '{name}' of shape {shape}; the layer declares shape "
                                     f"{declared}")

    def _first_accepting(self, node, tactic, op, args, workspace, stream, skip=()):
        """(outputs, tactic) of the first candidate of an unchosen layer that accepts `args`: the default tactic if
        it does, else the next registered candidate whose supports() takes these inputs and that does not refuse
        them when run (`skip`: tactics already seen to refuse them). When every candidate refuses, the default
        tactic's refusal is raised."""
        ctx = LayerContext.of(args)
        others = [t for t in tactics_for(node.kind, self.device) if t is not tactic and t not in skip]
        # (a precision none computes at these inputs runs float32, as tactic selection will choose)
        ok, op, _ = accepting([tactic] + others, op, ctx)
        # a candidate whose first run compiles (Tactic.ready) after those that run as they are: these runs want the
        # layer's values; the timing that follows compiles what it times, and a warm build (timing cached) nothing
        ok = sorted(ok, key=lambda t: not t.ready(op, ctx))
        first = None
        for t in ok or [tactic]:
            fn, full = empty_batch.guard(node.kind, self.device.bind(t, op))
            try:
                return (fn(op, args, None, workspace, stream) if full else fn(op, args)), t
            except Exception as e:
                if not _refusal(e):
                    raise
                G_LOGGER.verbose(f"layer '{node.name}': tactic {t.name} refuses these inputs ({e}); the build "
                                 f"tries the next candidate")
                # tactic selection reads this: a candidate that refused the build's run is no candidate
                node.meta.setdefault("refused_at_build", {})[t.name] = str(e.__cause__ or e)[:200]
                first = first or e
        raise first

    def _bound_or_next(self, i, node, tactic, op, args, workspace, stream):
        """(outputs, tactic) of a body layer in the builder's runs: its bound tactic, or where that refuses these
        inputs the first other candidate that accepts them (_first_accepting, which records the refusal for
        tactic selection); the step keeps the one that ran, so a loop's next iteration does not search again."""
        fn, full = empty_batch.guard(node.kind, self.device.bind(tactic, op))
        try:
            return (fn(op, args, None, workspace, stream) if full else fn(op, args)), tactic
        except Exception as e:
            if not _refusal(e):
                raise
            refusal = e
        node.meta.setdefault("refused_at_build", {})[tactic.name] = str(refusal.__cause__ or refusal)[:200]
        G_LOGGER.verbose(f"layer '{node.name}' (in a subgraph body): tactic {tactic.name} refuses these inputs "
                         f"({refusal}); the build tries the next candidate")
        others = [t for t in tactics_for(node.kind, self.device) if t is not tactic]
        if not others:
            raise refusal
        outs, ran = self._first_accepting(node, others[0], op, args, workspace, stream, skip=(tactic,))
        _, _, step_op, subs = self.steps[i]
        self.steps = list(self.steps)     # a new list: bound calls and compiled plans of the old one are redone
        self.steps[i] = (node, ran, step_op, subs)
        return outs, ran

    def _tactic(self, node):
        name = self.device.name
        return tactic_by_id(node.kind, node.tactic_id, name) if node.tactic_id is not None \
            else default_tactic(node, name)

    def _compute_last_use(self):
        last = {}
        for i, (node, _, _, subs) in enumerate(self.steps):
            for name in node.inputs:
                if name is not None:
                    last[name] = i
            for sub in subs.values():
                for name in sub.outer:
                    last[name] = i
        return last

    def free_plan(self, keep: set):
        """Per step, the names that die after it (not outputs, not kept)."""
        keep = set(keep) | set(self.graph.output_names) | set(self.consts)
        dies = [[] for _ in self.steps]
        for name, i in self._last_use.items():
            if name not in keep:
                dies[i].append(name)
        # outputs nobody reads die at once
        read = set(self._last_use)
        for i, (node, _, _, _) in enumerate(self.steps):
            for name in node.outputs:
                if name not in read and name not in keep:
                    dies[i].append(name)
        return dies

    def bound_calls(self) -> list:
        """Per step (fn, full) from Device.bind; bound once, again if a debug tool swapped the steps' tactics."""
        if self._bound is not self.steps:
            self._calls = [empty_batch.guard(node.kind, self.device.bind(t, op)) for node, t, op, _ in self.steps]
            self._bound = self.steps
        return self._calls

    def compiled(self, keep: frozenset, memory=None, sig=None) -> CompiledPlan:
        """The compiled plan (runtime/compiled.py) for these kept names and, with `memory`, the arena planned for
        shape signature `sig`; cached (in the context's ArenaCache when there is one, else here)."""
        cache = memory.compiled if memory is not None else self.__dict__.setdefault("_compiled", {})
        key = (sig, keep)
        cp = cache.get(key)
        if cp is None or cp.steps_ref is not self.steps:
            cp = cache[key] = CompiledPlan(self, keep, memory.plans.get(sig) if memory is not None else None,
                                           owned=memory is not None)
        return cp

    def run(self, feeds: dict, keep=(), parent_env=None, tactics=None, on_error=None, stream=None,
            profiler=None, memory=None) -> dict:
        """Execute; returns the env restricted to outputs and `keep` (everything when keep_all).

        Plain, tapped and profiled runs go through the compiled plan (runtime/compiled.py); the builder's
        keep-everything run, tolerant runs (`on_error`), tactic overrides and the first run at a new shape
        signature (which learns the arena) take the general loop below.

        tactics: {layer name: tactic} to run instead of the planned ones (debug tools).
        on_error: `fn(node, exception)`; when given, a failing layer is handed to it and skipped (its outputs stay
        absent) instead of raising, and a layer reading a missing tensor gets a `Skipped` exception.
        profiler: an IProfiler (runtime/profiler.py) told every layer's time on the device clock.
        memory: an ArenaCache (runtime/arena.py; one per execution context): layers whose tactics write into given
        buffers write into the planned views of one arena; what is returned never points into it."""
        if not self.keep_all and on_error is None and tactics is None:
            keep = frozenset(keep)
            sig = None
            if memory is not None:
                sig = memory.signature(feeds)
                if sig not in memory.plans:
                    return self._run_general(feeds, keep, parent_env, tactics, on_error, stream, profiler, memory)
                if self.workspace_bytes and memory.workspace is None:
                    memory.workspace = self.device.allocate(self.workspace_bytes)
                workspace = memory.workspace
            else:
                workspace = self.device.allocate(self.workspace_bytes) if self.workspace_bytes else None
            try:
                env = self.compiled(keep, memory, sig).run(feeds, parent_env, workspace, stream, profiler)
            except Exception as e:
                if not (self._fallback and _refusal(e)):
                    raise
                env = None    # a body layer refused in the builder's run: the general loop runs the next candidate
            if env is not None:
                return env
        return self._run_general(feeds, keep, parent_env, tactics, on_error, stream, profiler, memory)

    def run_outputs(self, feeds: dict, memory=None) -> dict:
        """execute's plain run (no taps, profiler, tactics or tolerance) returning only the graph's outputs ({name:
        value}); `feeds` hold every graph input, in the graph's input order (ExecutionContext._check_feeds makes
        them so). The context's last compiled plan is reused while the feeds keep its shapes and dtypes (no
        signature built or hashed) and run by position (CompiledPlan.run_outputs: its positional function, no
        feeds-by-name, taps, constants or second dict); a plan found by its signature before it has that function
        runs as `run` would run it (those runs count towards it); the first runs at a signature (which learn the
        arena and compile the plan), the builder's tolerant executor and keep-everything runs take `run`."""
        if memory is not None and not self.keep_all and not self._fallback:
            last = memory.last
            cp = None
            if last is not None and len(last[1]) == len(feeds):
                cp = last[0]
                for v, (shape, dtype) in zip(feeds.values(), last[1]):
                    if type(v) is not np.ndarray or v.shape != shape or (v.dtype is not dtype and v.dtype != dtype):
                        cp = None
                        break
            if cp is None or cp.steps_ref is not self.steps:
                cp = memory.compiled.get((memory.signature(feeds), _NO_KEEP))
                if cp is not None and cp.steps_ref is not self.steps:
                    cp = None
                elif cp is not None and not cp.fast:
                    env = cp.run(feeds, None, memory.workspace)
                    if env is not None:
                        return {name: env[name] for name in self.graph.output_names}
                    cp = None
                elif cp is not None and all(type(v) is np.ndarray for v in feeds.values()):
                    memory.last = (cp, tuple((v.shape, v.dtype) for v in feeds.values()))
            if cp is not None:
                out = cp.run_outputs(tuple(feeds.values()), memory.workspace)
                if out is not None:
                    return out
        env = self.run(feeds, memory=memory)
        return {name: env[name] for name in self.graph.output_names}

    def _run_general(self, feeds: dict, keep=(), parent_env=None, tactics=None, on_error=None, stream=None,
                     profiler=None, memory=None) -> dict:
        """The general loop (see `run`): looks tensors up by name, decides per layer; tolerant when asked."""
        dev = self.device
        env = dict(self.consts)
        env.update(feeds)
        if parent_env is not None:
            for name in self.outer:
                if name not in env and name in parent_env:
                    env[name] = parent_env[name]
        if self.keep_all or on_error is not None:
            dies = None
        else:  # cached per `keep`: loop bodies run this many times with the same keep set
            cache = self.__dict__.setdefault("_dies_cache", {})
            key = frozenset(keep)
            dies = cache.get(key)
            if dies is None:
                dies = cache[key] = self.free_plan(keep)
        workspace = dev.allocate(self.workspace_bytes) if self.workspace_bytes else None
        calls = self.bound_calls()
        static = self._static_shapes(feeds)
        plan = rec = planned = None
        if memory is not None and not self.keep_all and on_error is None and tactics is None:
            sig = memory.signature(feeds)
            if sig in memory.plans:
                plan = memory.plans[sig]
            else:   # first execution at these shapes: learn the tensors, plan the arena after it
                rec = arena.Recorder(dev, len(self.steps))
            if plan is not None:
                planned, planned_shapes = plan.outputs, plan.input_shapes
                kept = set(keep)
        max_bytes = default_limits().max_bytes  # no layer may make a tensor over the limit (native/limits.py)
        for i, (node, tactic, op, subs) in enumerate(self.steps):
            fn, full = calls[i]
            if tactics is not None and node.name in tactics:
                tactic = tactics[node.name]
                fn, full = empty_batch.guard(node.kind, dev.bind(tactic, op))
            try:
                args = [env[n] if n is not None else None for n in node.inputs]
                if on_error is not None:
                    missing = [n for s in subs.values() for n in s.outer if n not in env]
                    if missing:
                        raise KeyError(missing[0])
            except KeyError as e:
                if on_error is not None:
                    on_error(node, Skipped(e.args[0]))
                    continue
                raise ExecutionError(f"layer '{node.name}' reads tensor {e.args[0]!r}, which no earlier layer or "
                                     f"input produced") from None
            if subs:
                op = with_subgraphs(op, {k: _bind(s, env) for k, s in subs.items()})
            buffers = None
            if planned is not None:
                buffers = planned[i]
                if buffers is not None and tuple(getattr(a, "shape", None) for a in args) != planned_shapes[i]:
                    G_LOGGER.verbose(f"layer '{node.name}' reads shapes {[getattr(a, 'shape', None) for a in args]}"
                                     f", not the arena plan's {planned_shapes[i]}: the rest of this execution "
                                     f"allocates its outputs")
                    planned = buffers = None   # off the plan: nothing already in the arena is overwritten
            try:
                if self._search and node.tactic_id is None:   # the builder's runs: a candidate that accepts these
                    outs, tactic = self._first_accepting(node, tactic, op, args, workspace, stream)
                elif self._fallback and node.tactic_id is None:
                    outs, tactic = self._bound_or_next(i, node, tactic, op, args, workspace, stream)
                elif profiler is None:
                    outs = fn(op, args, buffers, workspace, stream) if full else fn(op, args)
                else:
                    outs = profiled_call(dev, profiler, node.name, fn, full, op, args, buffers, workspace, stream)
                if on_error is not None and (outs is None or len(outs) < len(node.outputs)):
                    raise RuntimeError(f"kernel returned {0 if outs is None else len(outs)} outputs, layer has "
                                       f"{len(node.outputs)}")
                for value in outs:   # a backstop for sizes no kernel checked: stop before the next layer reads it
                    if getattr(value, "nbytes", 0) > max_bytes:
                        check_size(op, value.shape, value.itemsize)
                if not builtin_tactic(tactic):   # a user tactic's outputs must be what the layer declares
                    self._check_outputs(node, tactic, outs, static)
            except Exception as e:  # a kernel failing on real data is reported with the layer's ONNX origin
                if on_error is not None:
                    on_error(node, e)
                    continue
                if isinstance(e, DebugkitError):
                    raise
                shapes = [getattr(a, "shape", None) for a in args]
                raise ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}, ONNX nodes "
                                     f"{node.source_nodes}) failed on input shapes {shapes}: "
                                     f"{type(e).__name__}: {e}") from e
            if rec is not None:
                rec.step(i, node, args, outs)
            for name, value in zip(node.outputs, outs):
                env[name] = value
            if plan is not None and kept:   # a tap outlives its arena slot: keep a copy
                for name in node.outputs:
                    if name in kept and name in env:
                        env[name] = arena.detach(dev, env[name], plan)
            if dies is not None:
                for name in dies[i]:
                    env.pop(name, None)
        if self.keep_all and self._records:
            self.last_env = env
        if rec is not None:
            memory.plans[sig] = arena.make_plan(self, rec)
        elif plan is not None:
            for name in self.graph.output_names:
                if name in env:
                    env[name] = arena.detach(dev, env[name], plan)
        return env

    def body_envs(self) -> dict:
        """{id(body graph): its last run's tensors} for every If / Loop / Scan body run under `record_bodies`
        (nested bodies included; a branch not taken, or a loop of no iterations, has none)."""
        out = {}
        for node, _, _, subs in self.steps:
            for sub in subs.values():
                if sub.last_env is not None:
                    out[id(sub.graph)] = sub.last_env
                out.update(sub.body_envs())
        return out

    def run_list(self, inputs: list, parent_env=None) -> list:
        """A body's run by position (If / Loop / Scan kernels call it through their bound subgraphs): the compiled
        plan's `run_inputs` once it has its straight-line function, else `run` (the first calls, the builder's
        runs, fallbacks)."""
        if not self.keep_all and not self._fallback:
            cp = self.__dict__.get("_list_plan")
            if cp is None or cp.steps_ref is not self.steps:
                cp = self._list_plan = self.compiled(_NO_KEEP)
            if cp.fast:
                ws = self.device.allocate(self.workspace_bytes) if self.workspace_bytes else None
                pos = cp.fast_pos   # (its positional function, once run_inputs made it: one call less)
                outs = pos(inputs, parent_env, ws) if pos else cp.run_inputs(inputs, parent_env, ws)
                if outs is not None:
                    return outs
        feeds = {t.name: v for t, v in zip(self.graph.inputs, inputs)}
        env = self.run(feeds, parent_env=parent_env)
        return [env[t.name] for t in self.graph.outputs]


Interpreter = GraphExecutor
_NO_KEEP = frozenset()


class _Unavailable:
    """Stands in for a layer's tactic when none exists (tolerant runs): running it raises the reason."""

    name = "unavailable"

    def __init__(self, error):
        self.error = error

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        raise self.error

    run._contract = True


def _bind(executor, env):
    return lambda inputs: executor.run_list(inputs, parent_env=env)


def current_layer():
    """The layer (a graph node) being executed by the innermost `GraphExecutor.run` on this thread's stack, or None.

    For attributing things that happen inside kernels (numpy's overflow warnings) to a layer without any cost on
    the execution path: it walks the stack only when asked."""
    import sys
    code = GraphExecutor.run.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("node")
        frame = frame.f_back
    return None
