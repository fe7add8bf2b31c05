"""No-op removal: nodes whose output equals their first input, bypassed so their readers read the input.

Removed: Identity; Dropout in inference (no training_mode, or a constant false one, and no mask read); Cast to
the input's own type; Reshape / Flatten / Expand / Squeeze / Unsqueeze / Tile whose static input and output shapes
are equal; Transpose with the identity permutation; Slice / Pad that cover or pad nothing; Concat or Sum of one
input; x*1, x/1, x+0, x-0, x**1 where the constant does not broadcast the shape or change the type.
All checks use static shapes and dtypes from ONNX shape inference; anything unknown is left alone.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from debugkit.surgeon.graphutil import apply_renames, elem_type, node_reads, static_shape, tensor_types

SAME_SHAPE_IS_NOOP = {"Reshape", "Flatten", "Expand", "Squeeze", "Unsqueeze", "Tile"}
NEUTRAL = {"Mul": 1, "Div": 1, "Add": 0, "Sub": 0, "Pow": 1}


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def remove_noops(graph) -> int:
    """Bypass every no-op node of `graph` (not inside bodies); returns how many were removed."""
    types = tensor_types(graph)
    inits = {t.name: t for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input}
    graph_outputs = {o.name for o in graph.output}

    def value(name):
        t = inits.get(name)
        if t is None:
            return None
        try:
            return numpy_helper.to_array(t)
        except Exception:
            return None

    def shape(name):
        if name in inits:
            return list(inits[name].dims)
        s = static_shape(types.get(name))
        return s if s is not None and all(d is not None for d in s) else None

    def dtype(name):
        if name in inits:
            return inits[name].data_type
        return elem_type(types.get(name))

    removed = 0
    producer = {o: n for n in graph.node for o in n.output if o}
    readers_of = {}
    for n in graph.node:
        for r in node_reads(n):
            readers_of.setdefault(r, 0)
            readers_of[r] += 1
    doomed, renames, dropped = set(), {}, set()

    def resolve(name):
        while name in renames:
            name = renames[name]
        return name

    for node in list(graph.node):
        src = _noop_source(node, value, shape, dtype, readers_of)
        if src is None:
            continue
        src, out = resolve(src), node.output[0]
        if out in graph_outputs:
            # the output name must survive: rename the source's producer output instead, when that is ours to do
            p = producer.get(src)
            if (p is None or src in graph_outputs or src in graph_inputs or src in inits
                    or id(p) in doomed):
                continue
            p.output[list(p.output).index(src)] = out
            renames[src] = out
            producer[out] = p
            dropped.add(src)
        else:
            renames[out] = src
            dropped.add(out)
        doomed.add(id(node))
        removed += 1
    if removed:
        keep = [n for n in graph.node if id(n) not in doomed]
        del graph.node[:]
        graph.node.extend(keep)
        apply_renames(graph, renames)
        vis = [v for v in graph.value_info if v.name not in dropped]
        del graph.value_info[:]
        graph.value_info.extend(vis)
    return removed


def _noop_source(node, value, shape, dtype, readers_of):
    """The input name a no-op node passes through, or None if the node is not a no-op."""
    if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0] or not node.output:
        return None
    op, x, y = node.op_type, node.input[0], node.output[0]
    if op == "Identity":
        return x
    if op == "Dropout":
        if any(o and readers_of.get(o) for o in node.output[1:]):
            return None
        if len(node.input) > 2 and node.input[2]:
            t = value(node.input[2])
            if t is None or bool(np.asarray(t).any()):
                return None
        return x
    xt, yt = dtype(x), dtype(y)
    if op == "Cast":
        return x if xt and xt == _attrs(node).get("to") else None
    if not xt or xt != yt:
        return None
    xs, ys = shape(x), shape(y)
    if xs is None or ys is None or xs != ys:
        return None
    if op in SAME_SHAPE_IS_NOOP:
        return x
    if op == "Transpose":
        perm = _attrs(node).get("perm")
        return x if perm is not None and list(perm) == list(range(len(xs))) else None
    if op == "Slice":
        steps = value(node.input[4]) if len(node.input) > 4 and node.input[4] else np.array([1])
        return x if steps is not None and np.all(np.asarray(steps) == 1) else None
    if op == "Pad":
        pads = value(node.input[1]) if len(node.input) > 1 and node.input[1] else _attrs(node).get("pads")
        return x if pads is not None and not np.any(np.asarray(pads)) else None
    if op in ("Concat", "Sum", "Max", "Min", "Mean") and len([i for i in node.input if i]) == 1:
        return x
    if op in NEUTRAL and len(node.input) == 2:
        c = value(node.input[1])
        if c is not None and c.size and np.all(c == NEUTRAL[op]):
            return x
        if op in ("Mul", "Add"):  # commutative: constant on the left
            c = value(node.input[0])
            other = node.input[1]
            if c is not None and c.size and np.all(c == NEUTRAL[op]) and dtype(other) == yt and shape(other) == ys:
                return other
    return None
