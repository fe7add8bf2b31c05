"""Activation memory at run time: one arena per execution context, each tensor at its memory-plan offset.

The interpreter learns a shape signature's tensors on the first execution at it (every layer allocating its own
outputs, as the CPU kernels always could), then plans their offsets with the builder's planner
(memory_plan.py: first fit by lifetime), allocates ONE arena on the device (`Device.allocate`) and hands
each layer whose tactic writes into given buffers (`Tactic.writes_outputs`) its planned views
(`Device.view(arena, offset, shape, dtype)`). Later executions at that signature reuse the arena; a new signature
(dynamic shapes) gets its own plan, cached.

Rules that keep it truthful:
* Only outputs of layers that write into given buffers are placed; graph outputs never are (the user keeps them),
  nor tensors a graph output is a view of.
* A tensor that is a view of a placed one (Reshape, Slice, Transpose return views) extends the placed tensor's
  lifetime to its own last use, so no later tensor is planned over memory something still reads.
* A layer whose input shapes differ from the plan's (data-dependent shapes) takes the run off the plan: from there
  on every layer allocates, so nothing already in the arena is overwritten.
* Values handed back (graph outputs, taps) never point into the arena (copied where they would), so a later
  execution cannot change a result the caller holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from backends.engine.memory_plan import place
from native.logger import G_LOGGER

_PLACEABLE_KINDS = set("biuf")   # numeric dtypes a raw byte buffer can hold (no objects, strings)


@dataclass
class ArenaPlan:
    """One shape signature's arena: per step the planned output buffers (None: the layer allocates its own) and
    the input shapes they were planned for."""

    buffer: object
    nbytes: int
    outputs: list            # per step: list of views (one per output, None where unplanned) or None
    input_shapes: list       # per step: tuple of input shapes at planning time (only where outputs is not None)
    offsets: dict = field(default_factory=dict)   # tensor name -> byte offset
    allocating: dict = field(default_factory=dict)  # layer name -> why it allocates its own outputs
    roots: dict = field(default_factory=dict)       # tensor -> the tensor whose memory it views (recorded)


class ArenaCache:
    """The arenas of one execution context, one per input-shape signature."""

    def __init__(self):
        self.plans: dict = {}
        self.compiled: dict = {}      # (signature, kept names) -> runtime/compiled.py's CompiledPlan
        self.workspace = None         # the tactics' scratch, allocated once per context
        self.last = None              # (CompiledPlan, per feed (shape, dtype)): executor.run_outputs' last plain run

    def signature(self, feeds: dict):
        return tuple((k, v.shape, v.dtype) if type(v) is np.ndarray else
                     (k, getattr(v, "shape", None), getattr(getattr(v, "dtype", None), "str", None))
                     for k, v in feeds.items())

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.plans.values() if p is not None)


class Recorder:
    """Watches the first execution at a signature: every step's input shapes, output arrays and which earlier
    tensor each output is a view of."""

    def __init__(self, device, n_steps):
        self.device = device
        self.input_shapes = [None] * n_steps
        self.outputs = [None] * n_steps   # per step: [(shape, dtype) | None]
        self.root = {}                    # tensor -> the tensor whose memory it views

    def step(self, i, node, args, outs):
        self.input_shapes[i] = tuple(getattr(a, "shape", None) for a in args)
        self.outputs[i] = [_layout(v) for v in outs]
        names = [n for n in node.inputs if n is not None]
        for name, v in zip(node.outputs, outs):
            if _layout(v) is None:
                continue
            for src, a in zip(names, args):
                if _layout(a) is not None and self.device.may_alias(v, a):
                    self.root[name] = self.root.get(src, src)
                    break


def _layout(v):
    """(shape, numpy dtype) of a tensor (a host array or a device buffer), None for anything else."""
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        return tuple(shape), np.dtype(dtype)
    except TypeError:
        return None


def make_plan(executor, rec: Recorder, logger=G_LOGGER) -> ArenaPlan | None:
    """Offsets for the recorded run's placeable tensors, the arena allocated and the views made (None when no
    tensor is placeable: then nothing changes)."""
    dev, steps, n = executor.device, executor.steps, len(executor.steps)
    graph_out = set(executor.graph.output_names)
    last = dict(executor._last_use)
    for name in graph_out:
        last[name] = n
    # a view keeps its root's memory alive until the view's own last use
    end, returned = {}, set()
    for name, root in rec.root.items():
        end[root] = max(end.get(root, -1), last.get(name, -1))
        if name in graph_out:   # the caller gets a view of it: the root keeps its own allocation (no copy out)
            returned.add(root)
    candidates, allocating = [], {}
    for i, (node, tactic, op, _) in enumerate(steps):
        why = dev.output_buffer_reason(tactic, op)
        outs = rec.outputs[i] or []
        if why is not None and node.outputs and all(o in rec.root for o in node.outputs):
            why = "returns a view of its input"
        elif why is None and not any(o is not None and o[1].kind in _PLACEABLE_KINDS and o[0] and
                                     int(np.prod(o[0])) > 0 for o in outs):
            why = "no numeric output to place"
        elif why is None and all(o in graph_out for o in node.outputs):
            why = "graph output (the caller keeps it)"
        if why is not None:
            allocating[node.name] = why
            continue
        for name, o in zip(node.outputs, outs):
            if o is None or name in graph_out or name in returned or o[1].kind not in _PLACEABLE_KINDS:
                continue
            size = int(np.prod(o[0], dtype=np.int64)) * o[1].itemsize
            if size <= 0:
                continue
            candidates.append((name, i, max(last.get(name, i), end.get(name, -1)), size))
    if not candidates:
        return None
    offsets, nbytes = place(candidates)
    buffer = dev.allocate(nbytes)
    outputs, in_shapes = [None] * n, [None] * n
    for i, (node, _, _, _) in enumerate(steps):
        views = [dev.view(buffer, offsets[name], o[0], o[1]) if name in offsets else None
                 for name, o in zip(node.outputs, rec.outputs[i] or [])]
        if any(v is not None for v in views):
            outputs[i], in_shapes[i] = views, rec.input_shapes[i]
    plan = ArenaPlan(buffer, nbytes, outputs, in_shapes, offsets, allocating, dict(rec.root))
    naive = sum(c[3] for c in candidates)
    kinds = {}
    for node, _, _, _ in steps:
        if node.name in allocating:
            kinds.setdefault(f"{node.kind} ({allocating[node.name]})", []).append(node.name)
    logger.verbose(f"arena for '{executor.graph.name}': {nbytes / 2**20:.2f} MiB holds {len(offsets)} tensors "
                   f"({naive / 2**20:.2f} MiB unshared); layers that allocate their own outputs: "
                   + ("; ".join(f"{k}: {len(v)}" for k, v in sorted(kinds.items())) or "none"))
    return plan


def detach(device, value, plan: ArenaPlan):
    """`value`, or a copy of it where it points into the plan's arena (what a caller keeps must not change)."""
    if plan is not None and device.may_alias(value, plan.buffer):
        return device.duplicate(value)
    return value
