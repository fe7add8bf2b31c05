"""TensorRT's algorithm selector as typed objects: what the builder tells a selector about a layer
(`AlgorithmContext`) and about each implementation it may pick (`Algorithm`), and the checks on the answer.

A selector implements `select_algorithms(context, choices) -> indices` (which of `choices` the builder may time;
an empty answer means "no preference" unless REJECT_EMPTY_ALGORITHMS is set) and `report_algorithms(contexts,
choices)` (the final pick per layer, with timings). Both objects also answer `obj["key"]` for the older dict form.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from native.errors import BuildError


class AlgorithmSelectionError(BuildError):
    """An algorithm selector returned an answer the builder cannot use (out-of-range or empty indices)."""


@dataclass
class AlgorithmIOInfo:
    """One input or output of an implementation: its memory format, dtype, shape and strides (elements)."""

    format: str
    dtype: str
    shape: list | None
    strides: list | None = None


def _strides(shape):
    if shape is None:
        return None
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(int(d), 1)
    return out[::-1]


@dataclass
class AlgorithmContext:
    """The layer being decided: its engine name (as the inspector shows it), kind, the ONNX nodes fused into it,
    shapes, dtypes and formats of its inputs and outputs at the profile's opt shapes, and its signature (kind,
    params, weight shapes, input shapes/dtypes, precision: what a timing cache and a replay file key on)."""

    name: str
    kind: str
    onnx_nodes: list
    input_shapes: list
    output_shapes: list
    dtypes: list
    formats: list
    precision: str
    signature: str

    _LEGACY = {"source_nodes": "onnx_nodes"}

    def __getitem__(self, key):
        return getattr(self, self._LEGACY.get(key, key))

    def get(self, key, default=None):
        return getattr(self, self._LEGACY.get(key, key), default)


@dataclass
class Algorithm:
    """One implementation the builder may pick for a context: tactic name and id, its I/O info, measured time
    (None until timed) and workspace bytes."""

    implementation: str
    tactic_id: int
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    timing_ms: float | None = None
    workspace_size: int = 0

    _LEGACY = {"tactic_name": "implementation"}

    @property
    def tactic_name(self) -> str:
        return self.implementation

    def __getitem__(self, key):
        return getattr(self, self._LEGACY.get(key, key))

    def get(self, key, default=None):
        return getattr(self, self._LEGACY.get(key, key), default)


def _desc(a):
    return [list(np.shape(a)) if hasattr(a, "shape") else None, str(getattr(a, "dtype", type(a).__name__))]


def layer_signature(node, inputs) -> str:
    """A short hash of what makes two layers interchangeable for tactic choice (not their names)."""
    raw = json.dumps([node.kind, node.params, {k: _desc(v) for k, v in node.weights.items()},
                      [_desc(a) for a in inputs], node.precision], sort_keys=True, default=str)
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def _format(node, rank):
    layout = node.meta.get("layout") if isinstance(node.meta, dict) else None
    if isinstance(layout, str):
        return layout
    return {4: "NCHW", 5: "NCDHW"}.get(rank, "linear")


def algorithm_context(node, inputs) -> AlgorithmContext:
    in_shapes = [list(np.shape(a)) if hasattr(a, "shape") else None for a in inputs]
    out_shapes = list(node.meta.get("output_shapes") or [None] * len(node.outputs))
    dtypes = [str(getattr(a, "dtype", "")) or None for a in inputs]
    formats = [_format(node, len(s)) if s is not None else None for s in in_shapes]
    return AlgorithmContext(node.name, node.kind, list(node.source_nodes), in_shapes, out_shapes, dtypes, formats,
                            node.precision, layer_signature(node, inputs))


def algorithm(tactic, op, context: AlgorithmContext, timing_ms=None) -> Algorithm:
    formats = getattr(tactic, "formats", ("linear",))
    fmt = formats[0] if formats else "linear"
    ins = [AlgorithmIOInfo(fmt if fmt != "linear" else (f or "linear"), d or "", s, _strides(s))
           for s, d, f in zip(context.input_shapes, context.dtypes, context.formats)]
    outs = [AlgorithmIOInfo(fmt if fmt != "linear" else "linear", context.precision, s, _strides(s))
            for s in context.output_shapes]
    try:
        ws = int(tactic.workspace_size(op, context.input_shapes) or 0)
    except Exception:
        ws = 0
    return Algorithm(tactic.name, tactic.id, ins, outs, timing_ms, ws)


def checked_selection(picked, choices, context, reject_empty: bool) -> list:
    """The selector's indices as ints, or AlgorithmSelectionError naming the layer and what was wrong."""
    try:
        picked = [int(i) for i in (picked or [])]
    except (TypeError, ValueError):
        raise AlgorithmSelectionError(f"algorithm selector returned {picked!r} for layer '{context.name}'; "
                                      f"select_algorithms must return a list of indices into the choices") from None
    if not picked and reject_empty:
        raise AlgorithmSelectionError(f"algorithm selector returned no choice for layer '{context.name}' and "
                                      f"REJECT_EMPTY_ALGORITHMS is set ({len(choices)} choices: "
                                      f"{[c.implementation for c in choices]})")
    bad = [i for i in picked if not 0 <= i < len(choices)]
    if bad:
        raise AlgorithmSelectionError(f"algorithm selector returned out-of-range indices {bad} for layer "
                                      f"'{context.name}': it has {len(choices)} choices (indices 0..{len(choices) - 1}: "
                                      f"{[c.implementation for c in choices]})")
    return picked


class SelectorChain:
    """Several selectors in a row (replay, then record, then the user's): each narrows what the previous left;
    every one receives the report."""

    def __init__(self, selectors):
        self.selectors = [s for s in selectors if s is not None]

    def select_algorithms(self, context, choices):
        idx = list(range(len(choices)))
        for s in self.selectors:
            sub = [choices[i] for i in idx]
            picked = checked_selection(s.select_algorithms(context, sub), sub, context, False)
            if picked:
                idx = [idx[i] for i in picked]
        return idx

    def report_algorithms(self, contexts, choices):
        for s in self.selectors:
            s.report_algorithms(contexts, choices)
