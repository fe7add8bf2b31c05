"""Duplicate layers: a layer that computes what an earlier one does (same kind, params, weights and input tensors)
is dropped and its readers read the earlier one's output; constants of equal value first become one, so layers
that differ only in which copy of a constant they read become duplicates too.

    w0 = Constant(-3.4e38); m0 = Where(mask, w0, zero0)   (block 0)
    w1 = Constant(-3.4e38); m1 = Where(mask, w1, zero1)   (block 1: the exporter's copy)
  ->
    w0 = Constant(-3.4e38); m0 = Where(mask, w0, zero0)   (both blocks read m0)

bert_mini and gpt2_tiny recompute their attention mask's Where in each of their 4 blocks. Only layers whose result
depends on their inputs alone (DETERMINISTIC kinds, no subgraphs, one output that is no graph output) are merged,
and only in FP32 builds: in a reduced-precision one the precision passes after fusion may give two copies different
precisions (one feeding a probability output, say), which one shared layer could not keep."""
from __future__ import annotations

import hashlib

import numpy as np

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.fusion_util import View, same_precision

_REDUCED = (BuilderFlag.FP16, BuilderFlag.BF16, BuilderFlag.INT8, BuilderFlag.FP8)
DETERMINISTIC = frozenset({"Constant", "Select", "ElementWise", "Unary", "Cast", "Expand", "Shuffle", "Activation",
                           "Gather", "Slice", "Concatenation"})


def _digest(v) -> tuple:
    a = np.asarray(v)
    return a.dtype.str, a.shape, hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


def _key(node) -> tuple | None:
    """What the layer computes from, or None when it is not a candidate."""
    if node.kind not in DETERMINISTIC or node.subgraphs or len(node.outputs) != 1 or node.meta.get("output_types"):
        return None
    try:
        params = repr(sorted(node.params.items()))
    except TypeError:
        return None
    weights = tuple(sorted((k, _digest(v)) for k, v in node.weights.items()))
    return node.kind, params, weights, tuple(node.inputs), node.precision


def dedupe_layers(graph, config, logger) -> int:
    """Drop each layer that duplicates an earlier one (see the module docstring); returns how many."""
    if any(config.get_flag(f) for f in _REDUCED):
        return 0
    view, count, seen = View(graph), 0, {}
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        key = _key(node)
        if key is None:
            continue
        first = seen.get(key)
        if first is None or first not in graph.nodes or not same_precision([first, node]):
            seen[key] = node
            continue
        out = node.outputs[0]
        if out in view.outs or not view.bypass(node, first.outputs[0], out):
            continue
        logger.verbose(f"fusion: '{node.name}' ({node.kind}) computes what '{first.name}' does: its readers read that")
        count += 1
    return count
