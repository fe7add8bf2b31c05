"""Choices made by measurement: on a device that says `chooses_by_timing` (CUDA), the layout pass keeps a
convolution region NHWC only where its timed NHWC plan beats the NCHW one, and the precision pass gives each layer
the enabled precision whose best tactic, plus the Reformat layers the choice adds at its boundaries, is fastest.

A `Probe` is what both passes measure with: every tensor's value from one run of the graph as it stands at the
profile's opt shapes on the target device, and the build's timing cache. Layer variants are timed through the
tactic machinery tactic selection uses (`tactic_selection.measure`: same candidates, same timing, same cache keys,
which include the precision and the input dtypes), so a variant timed here is not timed again when its tactic
is chosen, and a rebuild with the timing cache makes the same choices without timing anything. A replay file
(tactic_replay.py) records each layer's kind and precision; replaying it restores both without timing.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import numpy as np

from backends.engine.builder.algorithm_selector import algorithm, algorithm_context, checked_selection
from backends.engine.builder.config import TimingCache
from backends.engine.builder.feeds import timing_feeds
from backends.engine.builder.tactic_selection import enumerate_candidates, fastest, measure
from backends.engine.engine_graph import Node
from backends.engine.runtime.executor import GraphExecutor, default_tactic, node_op
from native.device import get_device
from native.precision import as_precision
from native.tactics import LayerContext

# a choice within this fraction of the fastest counts as tied (tactic_selection.TIE_MARGIN, same reason); ties go
# to the option listed first (the reduced precision: the FP16 flag permits it; NHWC: the device prefers it)
TIE_MARGIN = 0.03


def chooses_by_timing(config) -> bool:
    """Whether this build decides layout and precision by timing: the device says so and tactics are timed."""
    if config.get_flag("enable_tactic_heuristic"):
        return False
    return config.device.chooses_by_timing


def build_cache(ctx) -> TimingCache:
    """The cache this build's measurements go to: the caller's (config.timing_cache), else one private to the build
    that tactic selection reads too."""
    if ctx.config.timing_cache is not None:
        return ctx.config.timing_cache
    return ctx.state.setdefault("timing_cache", TimingCache())


def replay_entry(selector, layer_name):
    """What a replay file in the algorithm selector (alone or in a SelectorChain) recorded for this layer."""
    for s in getattr(selector, "selectors", None) or ([selector] if selector is not None else []):
        doc = getattr(s, "doc", None)
        if isinstance(doc, dict) and isinstance(doc.get("layers"), dict) and layer_name in doc["layers"]:
            return doc["layers"][layer_name]
    return None


@dataclass
class Measured:
    ms: float          # the best tactic's time
    tactic: str        # its name
    host: bool         # a host layer on a device with its own memory (ranked below any device kernel)


# A precision higher than one the flags enable wins only when clearly faster: by this fraction AND by this many ms.
# Small layers time alike in FP16 and FP32 (launch-bound), and a Reformat at the boundary then tips them to FP32; an
# `--fp16` engine whose small layers silently run FP32 hides exactly the FP16 problems users build it to find.
HIGHER_PRECISION_MARGIN = 0.10
HIGHER_PRECISION_MIN_MS = 0.05


def pick_precision(costs: dict):
    """The precision to run in ({precision: (host, ms)}, reduced ones first, float32 last): the first whose cost is
    within HIGHER_PRECISION_MARGIN or HIGHER_PRECISION_MIN_MS of the fastest (a host layer only when all are)."""
    live = {k: v for k, v in costs.items() if v is not None}
    if not live:
        return None
    host, best = min(live.values())
    return next(k for k, (h, ms) in live.items() if h == host and
                (ms <= best * (1 + HIGHER_PRECISION_MARGIN) or ms - best < HIGHER_PRECISION_MIN_MS))


def pick_int8(costs: dict):
    """{"int8": (host, ms), float precisions...}: INT8 when it is no slower than the fastest float option (within
    TIE_MARGIN), else the float precision pick_precision takes; None when nothing ran."""
    live = {k: v for k, v in costs.items() if v is not None}
    floats = {k: v for k, v in live.items() if k != "int8"}
    if "int8" not in live:
        return pick_precision(floats)
    if not floats:
        return "int8"
    host, best = min(floats.values())
    h8, ms8 = live["int8"]
    if h8 < host or (h8 == host and ms8 <= best * (1 + TIE_MARGIN)):
        return "int8"
    return pick_precision(floats)


def pick(options: dict):
    """The key of the fastest option ({key: (host, ms)}, in preference order), near-ties to the earlier one."""
    live = {k: v for k, v in options.items() if v is not None}
    if not live:
        return None
    best = min(live.values())
    return next(k for k, v in live.items() if v[0] == best[0] and v[1] <= best[1] * (1 + TIE_MARGIN))


class Probe:
    """Tensor values of one run of `graph` on the target device, and timing of layer variants on them."""

    def __init__(self, graph, ctx):
        self.config, self.device, self.logger = ctx.config, ctx.device, ctx.logger
        self.cache = build_cache(ctx)
        self.dev = get_device(ctx.device)
        self.env = GraphExecutor(graph, ctx.device, keep_all=True).run(timing_feeds(graph, ctx))
        self.said = set()
        self.timed = 0     # variants measured (not answered by the cache)
        self.candidates = 0   # tactics asked for a time (cached or measured): what bounds a cold build
        self.untimed = []  # layers that could not be timed, and why (the passes warn)
        self.why = ""      # why the last variant did not run

    def random(self, shape, dtype) -> np.ndarray:
        """Seeded random values of `shape` to time a variant on (int8: [-127, 127], floats: N(0, 1)), as views of
        one buffer per dtype grown to the largest size asked: a kernel's time does not depend on the values, and
        drawing a fresh 100-million-element tensor per layer cost ResNet-50's INT8 I/O timing ~1 s a layer."""
        n, dt = int(np.prod(shape)), np.dtype(dtype)
        bufs = self.__dict__.setdefault("_random", {})
        buf = bufs.get(dt)
        if buf is None or buf.size < n:
            rng = np.random.default_rng(0)
            buf = bufs[dt] = rng.integers(-127, 128, n, dtype=np.int8).astype(dt, copy=False) if dt.kind in "iu" \
                else rng.standard_normal(n, dtype=np.float32).astype(dt, copy=False)
        return buf[:n].reshape(shape)

    def derived(self, env) -> "Probe":
        """The same timing on other tensor values (`env`), without running anything."""
        other = copy.copy(self)
        other.env, other.untimed, other.why = env, [], ""
        return other

    def best(self, node, inputs) -> Measured | None:
        """The best tactic for `node` as it stands (precision, kind, params) on `inputs`; None when no tactic can
        run it exactly so (a precision no tactic computes in falls back in tactic selection: not this variant)."""
        want = node.precision
        ctx = LayerContext.of(inputs)
        shapes = list(ctx)
        try:      # pure: enumeration reads the variant and changes nothing
            found = enumerate_candidates(node, ctx, self.config, self.device, log=_Quiet(), said=self.said)
        except Exception as e:    # a tactic's supports() failing on these inputs: not a candidate, said why
            self.why = f"{type(e).__name__}: {str(e)[:300]}"
            self.logger.verbose(f"timing {node.kind} '{node.name}' in {want}: {self.why}; skipped")
            return None
        if found.fp32_only:
            self.why = f"no tactic computes in {want}"
            return None
        if not found.ok:
            self.why = "; ".join(f"{k}: {v}" for k, v in found.reasons.items())[:300] or "no tactics registered"
            return None
        cands = found.ok
        pinned = node.meta.get("tactics_allowed")
        if pinned and any(t.name in pinned for t in cands):
            cands = [t for t in cands if t.name in pinned]
        cands = self._selected(node, inputs, cands)
        before = self.cache.misses
        timings, t = {}, None
        for group in _probe_groups(cands, self.dev):
            timings = measure(node, group, inputs, self.config, self.device, self.cache)
            self.candidates += len(group)
            t = fastest(group, timings, self.device)
            if t is not None:
                break
        self.timed += self.cache.misses - before if not self.config.get_flag("disable_timing_cache") else 1
        if t is None:
            self.why = f"none of {[c.name for c in cands]} ran on inputs {shapes} (-v: each one's error)"
            return None
        return Measured(float(timings[t.id]), t.name, bool(t.host_layer) and
                        not self.dev.host_memory)

    def reformat_ms(self, value, from_type, to_type) -> float:
        """What converting `value` (stored as from_type) to to_type costs: a Reformat layer, timed (cached)."""
        if value is None or from_type == to_type:
            return 0.0
        node = self._reformat(from_type, to_type)
        m = self.best(node, [self.value_as(value, from_type)])
        return m.ms if m is not None else 0.0

    def value_as(self, value, storage):
        """`value` converted to the float storage type `storage`: on the host for host arrays (constants), else by
        a Reformat layer's run on the device."""
        if value is None or not _floating(value) or str(np.dtype(value.dtype)) == storage:
            return value
        if isinstance(value, np.ndarray):
            from native import numerics
            return numerics.to_storage(numerics.from_storage(value), storage)
        node = self._reformat(str(np.dtype(value.dtype)), storage)
        return self.dev.run(default_tactic(node, self.device), node_op(node), [value])[0]

    def _selected(self, node, inputs, cands):
        """The candidates a user's algorithm selector leaves (replay files answer through replay_entry)."""
        selector = self.config.algorithm_selector
        chain = getattr(selector, "selectors", None) or ([selector] if selector is not None else [])
        chain = [s for s in chain if not isinstance(getattr(s, "doc", None), dict)]
        if not chain:
            return cands
        context, op = algorithm_context(node, inputs), node_op(node)
        for s in chain:
            choices = [algorithm(t, op, context) for t in cands]
            picked = checked_selection(s.select_algorithms(context, choices), choices, context, False)
            if picked:
                cands = [cands[i] for i in picked]
        return cands

    @staticmethod
    def _reformat(from_type, to_type) -> Node:
        return Node(name=f"Reformat {from_type}->{to_type}", kind="Reformat", inputs=["x"], outputs=["y"],
                    params={"from": from_type, "to": to_type}, precision=as_precision(to_type),
                    meta={"output_types": [to_type]})


# Layout and precision choices time one tactic per family: the first plan of cuDNN's heuristic list
# (`cudnn-plan-0`), cuBLASLt's first algorithm, and every tactic that is a kernel of its own (a name without a
# numbered `-<i>` suffix). Each cuDNN plan costs a plan build, and which layout or precision wins is decided by the
# kernel family, not by the fourth plan's few percent; tactic selection then times every candidate of the variant
# chosen. False: every candidate (the unbounded build).
FIRST_OF_FAMILY = True


def family(name: str) -> str:
    """A tactic's family: its name without a numbered plan/algorithm suffix (`cudnn-plan-3` -> `cudnn-plan`)."""
    return re.sub(r"-\d+$", "", name)


def _probe_groups(cands, dev):
    """The candidate lists a probe tries in turn until one runs: the first of each family among the device's
    preferred tactics, then the other preferred ones, then the rest (host layers on a GPU)."""
    first = dev.preferred(cands) or list(cands)
    rest = [c for c in cands if c not in first]
    if not FIRST_OF_FAMILY:
        return [first] + ([rest] if rest else [])
    seen, heads = set(), []
    for c in first:
        if family(c.name) not in seen:
            seen.add(family(c.name))
            heads.append(c)
    others = [c for c in first if c not in heads]
    return [g for g in (heads, others, rest) if g]


def _floating(value) -> bool:
    dt = np.dtype(value.dtype)
    return dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn")


def variant(node, **changes) -> Node:
    """A copy of `node` to time (the graph's node is left as it is)."""
    out = copy.copy(node)
    out.meta = dict(node.meta)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


class _Quiet:
    """A logger for probing variants: what does not run is simply not a candidate."""

    def verbose(self, *a, **k):
        pass

    warning = info = verbose
