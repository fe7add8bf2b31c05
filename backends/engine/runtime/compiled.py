"""The compiled execution plan: an executor's layer list turned into a flat sequence of pre-bound calls.

The interpreter's general loop (executor.py) looks every tensor up by name, decides per layer whether to free,
tap, profile or plan memory, and checks what it can. That costs tens of microseconds per layer, which dominates
small models. A `CompiledPlan` does those decisions once, per (steps, tapped names, arena plan): every tensor gets
an integer slot, every layer becomes one tuple (bound call, calling convention, op, input slots, output slots,
planned output views and the input shapes they were planned for, slots that die after it), and `run` walks the
tuples. A tapped tensor's producer writes into memory of its own rather than the arena, so taps cost no copy. The same plan serves plain executes, taps (`--mark-all`) and the profiler; what stays
general (the builder's keep-everything run, tolerant runs with `on_error`, per-layer tactic overrides, the first
run at a new shape signature that learns the arena) runs in executor.py's loop.

Results are identical: the same tactics are called with the same arguments in the same order; only the
bookkeeping around them moved to compile time.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from backends.engine.runtime import arena, streams
from native.cpu import threads
from native.errors import DebugkitError, ExecutionError
from native.limits import check_size, default_limits
from native.logger import G_LOGGER

_NONE = 0   # slot 0 always holds None: the slot of an absent optional input
_MISSING = object()


class CompiledPlan:
    """One executor's steps compiled for one set of kept (tapped) names and one arena plan (or none)."""

    def __init__(self, executor, keep: frozenset, plan=None, owned: bool = False):
        """owned: the plan is one execution context's (its ArenaCache's), never run by two threads at once; its
        straight-line function binds If / Loop / Scan bodies once instead of per run."""
        dev = executor.device
        self.owned = owned
        self.steps_ref = executor.steps        # a debug tool that swaps the steps invalidates the plan
        self.arena_plan = plan
        slot = {}

        def index(name):
            if name is None:
                return _NONE
            i = slot.get(name)
            if i is None:
                i = slot[name] = len(slot) + 1
            return i
        for name in executor.graph.input_names:
            index(name)
        for name in executor.consts:
            index(name)
        for name in executor.outer:
            index(name)
        self.consts = [(index(n), v) for n, v in executor.consts.items()]
        self.outer = [(n, index(n)) for n in executor.outer]
        dies = executor.free_plan(keep)
        planned = plan.outputs if plan is not None else None
        # a tapped tensor outlives its arena slot: its producer (and the producer of the tensor it views) writes
        # into memory of its own instead, so nothing is copied out per execute
        unplaced = set()
        if plan is not None:
            for name in keep:
                unplaced.add(name)
                unplaced.add(plan.roots.get(name, name))
        planned_shapes = plan.input_shapes if plan is not None else None
        calls = executor.bound_calls()
        steps = []
        for i, (node, tactic, op, subs) in enumerate(executor.steps):
            fn, full = calls[i]
            if not full:
                fn = _kernel_of(fn)
            ins = tuple(index(n) for n in node.inputs)
            outs = tuple(index(n) for n in node.outputs)
            bufs = planned[i] if planned is not None else None
            if bufs is not None and unplaced.intersection(node.outputs):
                bufs = [None if n in unplaced else b for n, b in zip(node.outputs, bufs)]
                if all(b is None for b in bufs):
                    bufs = None
            shapes = planned_shapes[i] if bufs is not None else None
            die = tuple(slot[n] for n in dies[i] if n in slot)
            sub_outer = None
            if subs:
                names = {n for s in subs.values() for n in s.outer}
                sub_outer = (subs, tuple((n, index(n)) for n in sorted(names)))
            steps.append((fn, bool(full), op, ins, outs, len(outs), bufs, shapes, die, sub_outer, node, tactic))
        self.steps = steps
        self.slot = slot
        self.n_slots = len(slot) + 1
        self.template = [None] * self.n_slots   # the slots a run starts from: constants in place (one list copy)
        for i, v in self.consts:
            self.template[i] = v
        # what the caller gets back: outputs and taps (and constants, as the general loop returns them)
        self.returned = [(n, slot[n]) for n in dict.fromkeys(list(executor.graph.output_names) + sorted(keep)
                                                            + list(executor.consts)) if n in slot]
        self.detach_outputs = [(n, slot[n]) for n in executor.graph.output_names if n in slot] \
            if plan is not None else []
        self.required = [(n, slot[n]) for n in executor.graph.input_names]
        # a body's call by position (`run_inputs`): its inputs' slots in order, the outer names no input shadows,
        # its outputs' slots (None where an output is in no slot: the general path then says why)
        names = set(executor.graph.input_names)
        self.input_slots = tuple(slot[t.name] for t in executor.graph.inputs)
        self.outer_only = tuple((n, i) for n, i in self.outer if n not in names)
        outs = [slot.get(t.name) for t in executor.graph.outputs]
        self.output_slots = None if None in outs else tuple(outs)
        # execute's plain run (`run_outputs`): the graph's outputs by name, None where one is in no slot
        self.output_pairs = None if None in outs else tuple(zip(executor.graph.output_names, outs))
        self.output_names = tuple(executor.graph.output_names)
        self.device = dev
        self.max_bytes = default_limits().max_bytes
        self.runs = 0          # plain runs so far: the straight-line function is made from the FAST_AFTER-th on
        self.fast = None       # that function, once made (`straight_line`), or False where it cannot be
        self.fast_pos = None   # its positional twin for a body's calls (`run_inputs`), made at the first one

    def run(self, feeds: dict, parent_env=None, workspace=None, stream=None, profiler=None) -> dict | None:
        """Execute; returns {name: value} for outputs, taps and constants. None when a feed the graph needs is
        absent (the caller falls back to the general loop, which names what is missing)."""
        slots = self.template.copy()
        slot = self.slot
        for name, v in feeds.items():
            i = slot.get(name)
            if i is not None:
                slots[i] = v
        for name, i in self.required:
            if name not in feeds:
                return None
        if self.outer:
            if parent_env is None:
                return None
            for name, i in self.outer:
                if name not in feeds:
                    if name not in parent_env:
                        return None
                    slots[i] = parent_env[name]
        dev = self.device
        plan = self.arena_plan
        if profiler is None:
            fast = self.fast
            if fast is None:
                self.runs += 1
                if self.runs >= FAST_AFTER:
                    fast = self.fast = straight_line(self)
            if fast:
                fast(slots, workspace, stream)
                return self._returned(slots)
        on_plan = plan is not None
        max_bytes = self.max_bytes
        for fn, full, op, ins, outs_i, n_out, bufs, shapes, die, sub_outer, node, tactic in self.steps:
            n_in = len(ins)
            if n_in == 1:
                args = [slots[ins[0]]]
            elif n_in == 2:
                args = [slots[ins[0]], slots[ins[1]]]
            else:
                args = [slots[i] for i in ins]
            if sub_outer is not None:
                subs, names = sub_outer
                env = {n: slots[i] for n, i in names}
                op = with_subgraphs(op, {k: _bind(s, env) for k, s in subs.items()})
            if bufs is not None:
                if on_plan and _off_plan(args, shapes):
                    G_LOGGER.verbose(f"layer '{node.name}' reads shapes {[getattr(a, 'shape', None) for a in args]}"
                                     f", not the arena plan's {shapes}: the rest of this execution allocates "
                                     f"its outputs")
                    on_plan = False
                if not on_plan:
                    bufs = None
            try:
                if profiler is None:
                    outs = fn(op, args, bufs, workspace, stream) if full else fn(op, args)
                else:
                    outs = profiled_call(dev, profiler, node.name, fn, full, op, args, bufs, workspace, stream)
                if bufs is None:   # a backstop for sizes no kernel checked (planned views have the planned size)
                    for value in outs:
                        if getattr(value, "nbytes", 0) > max_bytes:
                            check_size(op, value.shape, value.itemsize)
            except Exception as e:  # a kernel failing on real data is reported with the layer's ONNX origin
                if isinstance(e, DebugkitError):
                    raise
                shapes_now = [getattr(a, "shape", None) for a in args]
                raise ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}, ONNX nodes "
                                     f"{node.source_nodes}) failed on input shapes {shapes_now}: "
                                     f"{type(e).__name__}: {e}") from e
            if n_out == 1:
                slots[outs_i[0]] = outs[0]
            elif len(outs) < n_out:
                raise ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}) returned {len(outs)} "
                                     f"outputs; it has {n_out} ({node.outputs})")
            else:
                for i, v in zip(outs_i, outs):
                    slots[i] = v
            for i in die:
                slots[i] = None
        return self._returned(slots)

    def run_inputs(self, inputs: list, parent_env: dict | None, workspace=None) -> list | None:
        """A body's plain run by position (an If branch, a Loop or Scan step: executor.run_list): the inputs in the
        graph's input order, the outer tensors from `parent_env`; returns the outputs in order. The same layer calls
        as `run` (the positional twin of its straight-line function), with no slots list, feeds or outputs dict.
        None where this plan cannot (no straight-line function yet, no arena-free plan, an input or outer tensor
        missing): the caller takes `run`'s way, which names what is missing."""
        pos = self.fast_pos
        if pos is None:
            if not self.fast or self.output_slots is None:
                return None
            pos = self.fast_pos = straight_line(self, positional=True)
        return pos(inputs, parent_env, workspace)

    def run_outputs(self, values, workspace=None) -> dict | None:
        """execute's plain run (executor.run_outputs): `values` (a sequence) are the feeds of every graph input in
        the graph's input order (ExecutionContext._check_feeds makes them so); returns {output name: value}, each
        detached from the arena. The positional function a body's calls run (`run_inputs`), so one generated
        function serves execute and bodies, with no slots list, lookups by name, taps or constants in the result.
        None where this plan cannot (no straight-line function yet, outer tensors, an output in no slot): the
        caller takes `run`'s way."""
        pos = self.fast_pos
        if pos is None:
            if not self.fast or self.outer or self.output_pairs is None:
                return None
            pos = self.fast_pos = straight_line(self, positional=True)
        outs = pos(values, None, workspace)
        if outs is None:
            return None
        plan = self.arena_plan
        if plan is not None:
            buf = plan.buffer
            plain = type(buf) is np.ndarray and buf.base is None
            for j, v in enumerate(outs):
                if plain and type(v) is np.ndarray:   # _apart inline (a call less per output)
                    b = v.base
                    if b is None or (type(b) is np.ndarray and b.base is None and b is not buf):
                        continue
                if self.device.may_alias(v, buf):
                    outs[j] = self.device.duplicate(v)
        names = self.output_names
        if len(names) == 1:
            return {names[0]: outs[0]}
        return dict(zip(names, outs))

    def keyed(self, specs):
        """execute's repeated plain run as one generated function (`keyed_runner`) for feeds of these (name, shape,
        dtype) specs, made once per specs; None where `run_outputs` could not run this plan by position."""
        got = self.__dict__.setdefault("_keyed", {}).get(specs)
        if got is None:
            got = self._keyed[specs] = keyed_runner(self, specs) or False
        return got or None

    def drop_region(self):
        """Run this plan's layers in order from its next run on (a streams.Region's trials found its two streams
        slower): its straight-line functions are made again without the region, so the region's layers write into
        the arena again."""
        n = len(self.steps)
        self._units = (list(range(n)), [st[8] for st in self.steps])
        self.fast = straight_line(self)
        self.fast_pos = None
        self.__dict__.pop("_keyed", None)     # the keyed runs called the positional function with the region

    def _returned(self, slots) -> dict:
        plan = self.arena_plan
        if plan is not None:
            dev = self.device
            for name, i in self.detach_outputs:
                slots[i] = arena.detach(dev, slots[i], plan)
        return {name: slots[i] for name, i in self.returned}

    # what the straight-line function calls out of line (rare paths), so it stays short
    def _layer_failed(self, k, args, e):
        fn, full, op, ins, outs_i, n_out, bufs, shapes, die, sub_outer, node, tactic = self.steps[k]
        shapes_now = [getattr(a, "shape", None) for a in args]
        return ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}, ONNX nodes "
                              f"{node.source_nodes}) failed on input shapes {shapes_now}: {type(e).__name__}: {e}")

    def _off_plan_now(self, k, args) -> bool:
        """False (the rest of this execution allocates) after logging why, as the loop does."""
        node, shapes = self.steps[k][10], self.steps[k][7]
        G_LOGGER.verbose(f"layer '{node.name}' reads shapes {[getattr(a, 'shape', None) for a in args]}, not the "
                         f"arena plan's {shapes}: the rest of this execution allocates its outputs")
        return False

    def _backstop(self, k, outs):
        op = self.steps[k][2]
        for value in outs:
            if getattr(value, "nbytes", 0) > self.max_bytes:
                check_size(op, value.shape, value.itemsize)

    def _too_few(self, k, outs):
        node, tactic, n_out = self.steps[k][10], self.steps[k][11], self.steps[k][5]
        return ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}) returned {len(outs)} "
                              f"outputs; it has {n_out} ({node.outputs})")


FAST_AFTER = 3   # plain runs of a plan before it gets its straight-line function (one-off plans skip the cost)


def straight_line(cp: CompiledPlan, positional: bool = False):
    """The plan's plain run (no profiler) as one generated Python function, straight-line: per layer the reads,
    the call, the stores and frees written out, its bound call, op and planned buffers as globals of the
    function, so a layer costs no tuple unpacking, loop or per-layer branches on what the plan already knows
    (~1 us a layer less: tools/dispatch_bench.py). Tensors live in the function's local variables (`t<slot>`):
    those it reads first are loaded from `slots` at the start, those alive at the end (outputs, taps) stored back.
    The same calls with the same arguments in the same order as `CompiledPlan.run`'s loop, the same off-plan
    fallback and size backstop, the same errors naming the layer. False when the plan has no steps.

    positional (a body's plan, `run_inputs`): `run(inputs, env, workspace) -> [outputs]` instead: the tensors it
    reads first come from `inputs` (the graph's input order), `env` (outer names) or the plan's constants, and its
    outputs are returned in order; None (nothing run) when the inputs' count differs or an outer tensor is missing."""
    if not cp.steps:
        return False
    g = {"cp": cp, "DebugkitError": DebugkitError, "MAXB": cp.max_bytes, "NEW": object.__new__, "BIND": partial,
         "ND": np.ndarray}
    on_plan0 = cp.arena_plan is not None
    body = []
    w = body.append
    envs = []
    loaded, live = [], {}   # slots read before any layer writes them; slots written and not freed (in order)

    def t(i):
        if i not in live and i not in loaded:
            loaded.append(i)
        return f"t{i}"
    units, dies = _units(cp)
    for u, k in enumerate(units):
        if type(k) is not int:   # the plan's tail as two streams (streams.py): its inputs in, its outputs out
            g[f"G{u}"] = k
            w(f"        k = {k.p}")
            w(f"        r = G{u}.run((" + "".join(t(i) + ", " for i in k.ins) + "), workspace, stream)")
            for j, i in enumerate(k.outs):
                w(f"        t{i} = r[{j}]")
                live[i] = True
            _free(w, t, live, dies[u], u < len(units) - 1)
            continue
        fn, full, op, ins, outs_i, n_out, bufs, shapes, die, sub_outer, node, tactic = cp.steps[k]
        die = dies[u]
        g[f"f{k}"], g[f"o{k}"] = fn, op
        guarded = getattr(fn, "_guarded", None) if full and ins else None
        if guarded is not None:   # an empty-batch guard (empty_batch.py): its test inline, the call it guards direct
            g[f"u{k}"] = guarded[0] if guarded[1] else _kernel_of(guarded[0])
        w(f"        k = {k}")
        view = _view_layer(fn, full, op, ins, n_out, bufs, sub_outer, cp)
        if view is None:
            w("        args = [" + ", ".join(t(i) for i in ins) + "]")
        opname = f"o{k}"
        if sub_outer is not None and cp.owned:
            # bodies bound once, to one dict per layer that holds this run's outer tensors while the layer runs
            subs, names = sub_outer
            env = g[f"E{k}"] = {}
            envs.append(f"E{k}")
            g[f"O{k}"] = with_subgraphs(op, {key: partial(sub.run_list, parent_env=env) for key, sub in subs.items()})
            for n, i in names:
                w(f"        E{k}[{n!r}] = {t(i)}")
            opname = f"O{k}"
        elif sub_outer is not None:   # the bodies bound to this run's outer tensors (as `run`'s loop binds them)
            subs, names = sub_outer
            g[f"T{k}"], g[f"D{k}"] = type(op), op.__dict__
            w("        env = {" + ", ".join(f"{n!r}: {t(i)}" for n, i in names) + "}")
            w(f"        op = NEW(T{k})")
            w(f"        op.__dict__.update(D{k})")
            bound = []
            for j, (key, sub) in enumerate(subs.items()):
                g[f"R{k}_{j}"] = sub.run_list
                bound.append(f"{key!r}: BIND(R{k}_{j}, parent_env=env)")
            w("        op.subgraphs = {" + ", ".join(bound) + "}")
            opname = "op"
        if view is not None:   # a view layer written out (_view_layer)
            shape, expr = view
            g[f"S{k}"] = shape
            for j, (_, arg) in enumerate(expr):
                g[f"V{k}_{j}"] = arg
            value = "a" + "".join(f"[V{k}_{j}]" if m == "getitem" else f".{m}(V{k}_{j})"
                                  for j, (m, _) in enumerate(expr))
            w(f"        a = {t(ins[0])}")
            w(f"        if type(a) is ND and a.shape == S{k}:")
            w(f"            t{outs_i[0]} = {value}")
            w("        else:")
            w("            args = [" + ", ".join(["a"] + [t(i) for i in ins[1:]]) + "]")
            w(f"            t{outs_i[0]} = f{k}({opname}, args)[0]")
            w(f"        if getattr(t{outs_i[0]}, 'nbytes', 0) > MAXB:")
            w(f"            cp._backstop({k}, [t{outs_i[0]}])")
        elif bufs is not None and on_plan0:
            g[f"b{k}"], g[f"s{k}"] = bufs, shapes
            checks = " or ".join(f"getattr(args[{j}], 'shape', None) != s{k}[{j}]"
                                 for j in range(min(len(ins), len(shapes))))
            if checks:
                w(f"        if on_plan and ({checks}):")
                w(f"            on_plan = cp._off_plan_now({k}, args)")
            call = f"f{k}({opname}, args, b{k} if on_plan else None, workspace, stream)" if full \
                else f"f{k}({opname}, args)"
            if guarded is not None:
                call = _unguarded(k, opname, f"b{k} if on_plan else None", guarded[1], call)
            w(f"        r = {call}")
            w("        if not on_plan:")
            w(f"            cp._backstop({k}, r)")
            if n_out == 1:
                w(f"        t{outs_i[0]} = r[0]")
        else:
            call = f"f{k}({opname}, args, None, workspace, stream)" if full else f"f{k}({opname}, args)"
            if guarded is not None:
                call = _unguarded(k, opname, "None", guarded[1], call)
            w(f"        r = {call}")
            if n_out == 1:   # (the one output the next layers read)
                w(f"        t{outs_i[0]} = r[0]")
                w(f"        if getattr(t{outs_i[0]}, 'nbytes', 0) > MAXB:")
                w(f"            cp._backstop({k}, r)")
            else:
                w("        for v in r:")
                w("            if getattr(v, 'nbytes', 0) > MAXB:")
                w(f"                cp._backstop({k}, r)")
        if n_out != 1:
            w(f"        if len(r) < {n_out}:")
            w(f"            raise cp._too_few({k}, r)")
            for j, i in enumerate(outs_i):
                w(f"        t{i} = r[{j}]")
        for i in outs_i:
            live[i] = True
        if sub_outer is not None and cp.owned:
            w(f"        E{k}.clear()")
        _free(w, t, live, die, u < len(units) - 1)
    clear = "".join(f"        {e}.clear()\n" for e in envs)   # a failed run keeps no outer tensor alive either
    if positional:
        outs = [t(i) for i in cp.output_slots]
        g["TPL"], g["MISSING"] = cp.template, _MISSING
        pos = {i: p for p, i in enumerate(cp.input_slots)}
        outer = dict((i, n) for n, i in cp.outer_only)
        lines = ["def run(inputs, env, workspace):", "    stream = None",
                 f"    if len(inputs) != {len(cp.input_slots)}:", "        return None"]
        if outer:
            lines += ["    if env is None:", "        return None"]
        for i, n in outer.items():   # (every outer tensor, read or not: as run_inputs checks them)
            lines += [f"    t{i} = env.get({n!r}, MISSING)", f"    if t{i} is MISSING:", "        return None"]
        lines += [f"    t{i} = inputs[{pos[i]}]" if i in pos else f"    t{i} = TPL[{i}]"
                  for i in loaded if i not in outer]
        lines += [f"    on_plan = {on_plan0}", "    k = 0", "    args = ()", "    try:"]
        lines += body
        lines.append("        return [" + ", ".join(outs) + "]")
    else:
        lines = ["def run(slots, workspace, stream):", f"    on_plan = {on_plan0}", "    k = 0", "    args = ()"]
        lines += [f"    t{i} = slots[{i}]" for i in loaded]
        lines.append("    try:")
        lines += body
        lines += [f"        slots[{i}] = t{i}" for i in live]
    lines += ["    except DebugkitError:", clear + "        raise", "    except Exception as e:",
              clear + "        raise cp._layer_failed(k, args, e) from e"]
    exec(compile("\n".join(lines), f"<compiled plan of {len(cp.steps)} layers>", "exec"), g)
    return g["run"]


def keyed_runner(cp: CompiledPlan, specs):
    """`run(feeds, workspace) -> {output name: value} | None`: `CompiledPlan.run_outputs` for feeds by name, written
    out for one set of specs ((name, shape, dtype) per graph input, in the graph's input order: what
    ExecutionContext's checked path accepted): each feed's type, shape and dtype tested inline (None, nothing run,
    for anything else: the caller then takes the checked path), the positional function called, each output detached
    from the arena as run_outputs detaches it (`_apart`'s test inline, else Device.may_alias / duplicate), the dict
    built directly. The same layer calls as run_outputs; what it saves is execute's per-run Python around them
    (~1 us: a feeds list, two calls, a loop and dict(zip) per run). None where run_outputs cannot run this plan (no
    straight-line function yet, outer tensors, an output in no slot) or specs do not match the graph's inputs."""
    if not cp.fast or cp.outer or cp.output_pairs is None or len(specs) != len(cp.input_slots):
        return None
    pos = cp.fast_pos
    if pos is None:
        pos = cp.fast_pos = straight_line(cp, positional=True)
    g = {"POS": pos, "ND": np.ndarray, "MAYALIAS": cp.device.may_alias, "DUP": cp.device.duplicate}
    lines = ["def run(feeds, workspace):", f"    if len(feeds) != {len(specs)}:", "        return None"]
    for j, (name, shape, dtype) in enumerate(specs):
        g[f"SH{j}"], g[f"DT{j}"] = shape, dtype
        lines += [f"    v{j} = feeds.get({name!r})",
                  f"    if type(v{j}) is not ND or v{j}.shape != SH{j} or v{j}.dtype is not DT{j}:",
                  "        return None"]
    lines += ["    outs = POS([" + ", ".join(f"v{j}" for j in range(len(specs))) + "], None, workspace)",
              "    if outs is None:", "        return None"]
    plan = cp.arena_plan
    names = cp.output_names
    for j in range(len(names)):
        lines.append(f"    o{j} = outs[{j}]")
        if plan is None:
            continue
        g["BUF"] = buf = plan.buffer
        if type(buf) is np.ndarray and buf.base is None:   # _apart's test first: an owned array needs no bounds check
            lines += [f"    b = o{j}.base if type(o{j}) is ND else BUF",
                      f"    if not (b is None or (type(b) is ND and b.base is None and b is not BUF)) and "
                      f"MAYALIAS(o{j}, BUF):",
                      f"        o{j} = DUP(o{j})"]
        else:
            lines += [f"    if MAYALIAS(o{j}, BUF):", f"        o{j} = DUP(o{j})"]
    lines.append("    return {" + ", ".join(f"{n!r}: o{j}" for j, n in enumerate(names)) + "}")
    exec(compile("\n".join(lines), f"<keyed run of {len(cp.steps)} layers>", "exec"), g)
    return g["run"]


def _free(w, t, live, die, more):
    """Write out the frees of slots `die` (after the last layer the function's return frees them)."""
    for i in die:
        t(i)
        live.pop(i, None)
        if more:
            w(f"        t{i} = None")


def _units(cp):
    """The straight-line function's order, with each unit the slots that die after it: the steps' indices, the tail
    from streams.find_region's first step on as one `streams.Region` (only for a context's own plan on the CPU,
    with a pool of two or more threads: two streams). Made once per plan (its plain and positional functions share
    the region)."""
    got = cp.__dict__.get("_units")
    if got is not None:
        return got
    steps = cp.steps
    found = streams.find_region(cp) if cp.owned and getattr(cp.device, "name", None) == "cpu" \
        and threads.pool_size() > 1 else None
    if found is None:
        got = list(range(len(steps))), [st[8] for st in steps]
    else:
        p, where = found
        made = {i for st in steps[p:] for i in st[4]}
        mortal = {i for st in steps for i in st[8]}
        outs = sorted(i for i in made if i not in mortal)   # (the region runs to the end: only what lives on)
        dies = [st[8] for st in steps[:p]] + [sorted({i for st in steps[p:] for i in st[8]} - made)]
        got = list(range(p)) + [streams.Region(cp, p, where, outs)], dies
    cp._units = got
    return got


def _view_layer(fn, full, op, ins, n_out, bufs, sub_outer, cp):
    """(input shape, [(ndarray method, argument)]) for a layer whose kernel holds a view recipe by now (a Shuffle's
    reshape / transposes, a Slice's index, a Gather's one index: `kernel._view(op, *constant inputs)`,
    native/cpu/kernels/tensor.py), which the straight-line function then writes out inline for an array of that
    shape: the same numpy view calls without the kernel's call, list and look-ups (~0.3 us a layer; silero-vad has
    ~15); else None (other inputs take the kernel's call). Inputs after the first must be the plan's constants."""
    if full or not ins or n_out != 1 or bufs is not None or sub_outer is not None:
        return None
    view = getattr(fn, "_view", None)
    if view is None:
        return None
    consts = {i for i, _ in cp.consts}
    if any(i not in consts for i in ins[1:]):
        return None
    try:
        return view(op, *(cp.template[i] for i in ins[1:]))
    except TypeError:   # (a view of another arity than these inputs)
        return None


def _unguarded(k, opname, bufs, full, guard_call) -> str:
    """The call of layer k's empty-batch guard written out: the guard itself (`guard_call`) for an input whose leading
    dim is 0, else the call it guards (`u<k>`) with the same arguments, as the guard would make it."""
    inner = f"u{k}({opname}, args, {bufs}, workspace, stream)" if full else f"u{k}({opname}, args)"
    return f"({guard_call} if getattr(args[0], 'shape', ())[:1] == (0,) else {inner})"


def _apart(v, buf) -> bool:
    """True where host array `v` cannot share memory with the arena `buf` (an array owning its memory) without
    numpy's bounds check (may_share_memory, ~0.5 us): `v` owns its memory (no base: a kernel's fresh output), or
    its base owns memory that is not `buf` (numpy points a view of a view at the owner). False: ask may_alias.
    (CompiledPlan.run_outputs applies this rule inline.)"""
    if type(v) is not np.ndarray or type(buf) is not np.ndarray or buf.base is not None:
        return False
    b = v.base
    return b is None or (type(b) is np.ndarray and b.base is None and b is not buf)


def _kernel_of(fn):
    """The kernel a simple tactic's bound `run(op, inputs)` only forwards to (native/tactics.py simple_tactic), to
    call in its place; else `fn`."""
    f = getattr(fn, "__func__", None)
    k = getattr(f, "_kernel", None)
    return k[1] if k is not None and k[0] is f else fn


def _off_plan(args, shapes) -> bool:
    for a, s in zip(args, shapes):
        if getattr(a, "shape", None) != s:
            return True
    return False


def profiled_call(dev, profiler, name, fn, full, op, args, bufs, workspace, stream):
    """One layer's outputs, reported to `profiler`: a timeline (runtime/trace.py) gets host marks and no
    synchronisation; an IProfiler gets the layer's time on the device's own clock (a GPU's events, with its host
    launch overhead not in it), as the builder times tactics. The compiled plan and the interpreter share it."""
    if hasattr(profiler, "begin"):
        tok = profiler.begin(name, "layer")
        outs = fn(op, args, bufs, workspace, stream) if full else fn(op, args)
        profiler.end(tok)
        return outs
    got = []
    ms = dev.time(lambda: got.append(fn(op, args, bufs, workspace, stream) if full else fn(op, args)))
    profiler.report_layer_time(name, ms)
    return got[0]


def with_subgraphs(op, subgraphs):
    """A copy of `op` whose `subgraphs` are these bound bodies (dataclasses.replace's result, without re-running
    the dataclass __init__ per If / Loop call)."""
    o = object.__new__(type(op))
    o.__dict__.update(op.__dict__)
    o.subgraphs = subgraphs
    return o


def _bind(executor, env):
    return lambda inputs: executor.run_list(inputs, parent_env=env)
