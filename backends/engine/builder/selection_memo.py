"""Tactic selection reused layer by layer across the builds of one search (a precision search's probes).

A probe that moves a few layers to another precision leaves most layers as the parent build had them: same kind,
params, weight arrays, precision, format and input shapes/dtypes. For such a layer, tactic selection (candidate
enumeration, the algorithm selector, the timing-cache lookup, weight preparation: most of a probe's tactic
selection time) is a pure function of what the layer is, the build settings and the timing cache, which the
search's builds share. `SelectionMemo` keeps each layer's outcome (tactic, precision and meta after selection,
prepared weights, its report to the selector) under a key made of exactly those inputs, so the next build copies it
instead of redoing it: the engine is the one a from-scratch build with the same timing cache makes (tested bit for
bit in tests/backends/test_selection_memo.py).

Weight arrays are keyed by identity (a build shares them with the graph it copied; passes replace weights, never
write into them) and kept alive by the memo, so an id is never reused for another array while its entry exists.
A layer with a value the key cannot describe, subgraph bodies, or a selector that is not declared pure
(`memo_token`) is selected afresh; a device without host memory (CUDA: prepared weights are device buffers an
engine may own), INT8 and DLA builds (their choices read tensor scales and placement) keep no memo. The memo lives on the TimingCache the builds share (`TimingCache.selections`).
"""
from __future__ import annotations

import enum
import json

import numpy as np

MAX_ENTRIES = 20000   # then the memo starts over (it holds prepared weights and keeps weight arrays alive)


class _Unkeyable(Exception):
    pass


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


def _fp(v, keep):
    """A hashable description of `v` that differs whenever `v` could select differently: values with their types
    (1, 1.0 and True differ), containers element by element, arrays by identity. Scalars inside containers are
    described inline (this runs for every layer of every probe)."""
    t = type(v)
    if t in _SCALARS:
        return (t, v)
    if t is dict:
        return (dict,) + tuple((type(k), k, type(x), x) if type(k) in _SCALARS and type(x) in _SCALARS
                               else (_fp(k, keep), _fp(x, keep)) for k, x in v.items())
    if t is list or t is tuple:
        return (t,) + tuple((type(x), x) if type(x) in _SCALARS else _fp(x, keep) for x in v)
    if isinstance(v, np.ndarray):
        keep.append(v)
        return (np.ndarray, id(v))
    if isinstance(v, np.generic):
        return (np.generic, v.dtype.str, v.item())
    if isinstance(v, enum.Enum):
        return (t, v.value)
    if isinstance(v, (set, frozenset)):
        return (t,) + tuple(sorted(repr(_fp(x, keep)) for x in v))
    raise _Unkeyable(t.__name__)


def _input_desc(env, name):
    if name is None:
        return None
    if env is None or name not in env:
        return ("absent",)
    v = env[name]
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return (tuple(int(d) for d in v.shape), np.dtype(v.dtype).name)
    return ("obj", type(v).__name__)


def selector_token(selector):
    """What identifies a selector's answers, or None when they may change from call to call (the memo is off)."""
    if selector is None:
        return ("none",)
    return getattr(selector, "memo_token", None)


class SelectionMemo:
    """key -> the outcome of tactic selection for one layer (see the module docstring)."""

    def __init__(self):
        self.entries: dict = {}
        self.keep: list = []     # the weight arrays whose ids are in keys
        self.hits = 0
        self.misses = 0

    @staticmethod
    def build_key(config, device, selector) -> tuple | None:
        """The part of every key that is the same for all layers of one build (None: memo off)."""
        token = selector_token(selector)
        if token is None:
            return None
        from native.tactics import registered_tactics
        cfg = {k: v for k, v in config.to_json().items() if k not in ("layer_precisions", "layer_output_types")}
        # the tactics registered now (a tactics module loaded, a kind's kernels loaded on first use): another set of
        # candidates is another choice
        tactics = tuple((t.kind, t.name, type(t).__module__, type(t).__qualname__, id(t))
                        for t in registered_tactics(str(device)))
        return (json.dumps(cfg, sort_keys=True, default=str), str(device), token, tactics)

    def key(self, build_key, node, env, have_inputs):
        if node.subgraphs:
            return None
        keep = []
        try:
            k = (build_key, node.name, node.kind, _fp(node.params, keep), _fp(node.weights, keep),
                 _fp(node.source_nodes, keep), node.precision, node.tactic_id, node.tactic_name, _fp(node.meta, keep),
                 tuple(_input_desc(env, i) for i in node.inputs), have_inputs)
            hash(k)
        except (_Unkeyable, TypeError):
            return None
        self._pending_keep = keep
        return k

    def get(self, key):
        hit = self.entries.get(key) if key is not None else None
        if hit is None:
            self.misses += key is not None
        else:
            self.hits += 1
        return hit

    def put(self, key, node, report, prep_key=None):
        if key is None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.clear()
            self.keep = []
        self.keep.extend(getattr(self, "_pending_keep", ()))
        self._pending_keep = []
        from backends.engine.builder.graph_copy import _tree
        self.entries[key] = {"tactic": (node.tactic_id, node.tactic_name), "precision": node.precision,
                             "meta": _tree(node.meta), "weights": dict(node.weights), "report": report,
                             "prep_key": prep_key}

    @staticmethod
    def apply(entry, node):
        """Make `node` what selection made of its twin."""
        from backends.engine.builder.graph_copy import _tree
        node.tactic_id, node.tactic_name = entry["tactic"]
        node.precision = entry["precision"]
        node.meta = _tree(entry["meta"])
        node.weights = dict(entry["weights"])
        return entry["report"]
