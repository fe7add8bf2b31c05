"""Residual add + LayerNorm -> one Normalization layer that adds first (fused param `residual_input` = 3, its input),
on a device whose Normalization tactics do (`Device.fuses_residual_norm`: the CPU's kernels/norm_residual.py), in
FP32 builds (a reduced-precision build keeps the two layers and their precisions).

    s = Add(x, r)                                  ElementWise SUM of two float32 tensors of one static shape
    y = LayerNormalization(s, gamma, beta)
  ->
    y, mean, inv_std[, s] = Normalization(x, gamma, beta, r)   (s an output where others read it: pre-LN blocks)

Each transformer block has two such pairs (bert_mini 8 in all, gpt2_tiny 8, vit_tiny 12): a layer fewer each, and
the sum made and normalised in one pass over its rows."""
from __future__ import annotations

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.fusion_util import View, fused_node, same_precision

_REDUCED = (BuilderFlag.FP16, BuilderFlag.BF16, BuilderFlag.INT8, BuilderFlag.FP8)


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)


def _residual_add(view, norm):
    """(add node, x, r) when the LayerNorm's input is a plain float32 Add of two same-shape tensors, else None."""
    add = view.producer(norm.inputs[0], "ElementWise", "SUM")
    if add is None or len(add.inputs) != 2 or len(add.outputs) != 1 or add.params.get("post_ops"):
        return None
    x, r = add.inputs
    if x is None or r is None or x == r or view.const(x) is not None or view.const(r) is not None:
        return None
    shapes = [view.shape(t) for t in (x, r, add.outputs[0])]
    if not _static(shapes[0]) or shapes[0] != shapes[1] or shapes[0] != shapes[2]:
        return None
    if any(view.dtype(t) != "float32" for t in (x, r, add.outputs[0])) or not same_precision([add, norm]):
        return None
    return add, x, r


def fuse_residual_norm(graph, config, logger) -> int:
    """Each LayerNorm whose input is a residual Add: the Add folded into it (see the module docstring)."""
    if not getattr(getattr(config, "device", None), "fuses_residual_norm", False) or \
            any(config.get_flag(f) for f in _REDUCED):
        return 0
    view, count = View(graph), 0
    for norm in list(graph.nodes):
        if norm not in graph.nodes or norm.kind != "Normalization" or norm.params.get("residual_input") or \
                norm.params.get("mode", "LAYER") != "LAYER" or len(norm.inputs) != 3 or len(norm.outputs) != 3:
            continue
        found = _residual_add(view, norm)
        if found is None:
            continue
        add, x, r = found
        s = add.outputs[0]
        others = [c for c in view.cons.get(s, []) if c is not norm]
        where = graph.nodes.index(norm)
        if any(graph.nodes.index(c) < where for c in others):   # the sum is now made where the LayerNorm stood
            continue
        outputs = list(norm.outputs) + ([s] if others or s in view.outs else [])
        new = fused_node([add, norm], "Normalization", [x, norm.inputs[1], norm.inputs[2], r], outputs,
                         dict(norm.params, residual_input=3), weights=dict(norm.weights))
        new.meta = dict(norm.meta, **new.meta)
        view.replace([add, norm], new)
        logger.verbose(f"fusion: residual add '{add.name}' into LayerNorm '{norm.name}'"
                       f"{' (its sum kept as an output)' if len(outputs) > 3 else ''}")
        count += 1
    return count
