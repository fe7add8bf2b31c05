"""Inline `If` nodes whose condition is a constant: the taken branch's nodes replace the node."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from debugkit.surgeon.graphutil import apply_renames


def _branch(node, taken: bool):
    for a in node.attribute:
        if a.name == ("then_branch" if taken else "else_branch"):
            return a.g
    return None


def inline_constant_ifs(graph) -> int:
    """Replace each top-level If with a constant condition by its taken branch; returns how many were inlined.

    Branch outputs are renamed to the If's outputs; a branch output that is not produced by a branch node
    (an initializer or an outer name) is passed on by an Identity, removed later by no-op removal when possible.
    Skipped when a branch name would clash with a name of the enclosing graph."""
    inits = {t.name: t for t in graph.initializer}
    outer_names = {o for n in graph.node for o in n.output} | set(inits) | {i.name for i in graph.input}
    new_nodes, count = [], 0
    for node in graph.node:
        cond = inits.get(node.input[0]) if node.op_type == "If" and node.domain in ("", "ai.onnx") else None
        if cond is None:
            new_nodes.append(node)
            continue
        try:
            taken = bool(np.asarray(numpy_helper.to_array(cond)).reshape(-1)[0])
        except Exception:
            new_nodes.append(node)
            continue
        body = _branch(node, taken)
        body_defined = {o for n in body.node for o in n.output if o} | {t.name for t in body.initializer}
        if body is None or body_defined & outer_names or len(body.output) != len(node.output):
            new_nodes.append(node)
            continue
        produced = {o for n in body.node for o in n.output if o}
        renames, extra = {}, []
        for out, bout in zip(node.output, body.output):
            if not out:
                continue
            if bout.name in produced and bout.name not in renames:
                renames[bout.name] = out
            else:
                extra.append(onnx.helper.make_node("Identity", [renames.get(bout.name, bout.name)], [out],
                                                   name=f"{node.name or 'If'}/{out}/passthrough"))
        copied = []
        for n in body.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            for i, o in enumerate(c.output):
                if o in renames:
                    c.output[i] = renames[o]
            copied.append(c)
        tmp = onnx.GraphProto()
        tmp.node.extend(copied)
        apply_renames(tmp, renames)
        new_nodes.extend(tmp.node)
        new_nodes.extend(extra)
        for t in body.initializer:
            graph.initializer.append(t)
        outer_names |= body_defined
        count += 1
    if count:
        del graph.node[:]
        graph.node.extend(new_nodes)
    return count
