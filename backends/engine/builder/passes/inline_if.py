"""If layers whose condition is a build-time constant become the branch they always take.

Exporters test ranks, sizes and flags that folding turns into constants (silero-vad's decoder asks `x.dim() == 3`
and whether a state was given; with the profile's shapes fixed, shape folding answers both). Such an If is
replaced by its taken branch's layers, placed where it stood, and an Identity per output binds the branch's
output tensor to the If's (the fusions' identity elimination removes them). The folding passes then see through
it (constants the branch slices or concatenates fold, its Shape layers fold at fixed shapes, nested Ifs get
constant conditions in turn), the fusions see one graph, and the runtime runs no body. Names stay the ONNX names,
so taps and reports still name the branch's tensors and nodes.

A branch is left in place when one of the tensors it produces already has a producer elsewhere in the graph
(nested bodies included): inlining would make two writers of one name.
"""
from __future__ import annotations

import numpy as np

from backends.engine.engine_graph import Graph, Node


def _condition(graph: Graph, node):
    """The If's condition as a Python bool when it is a one-element build-time constant, else None."""
    if not node.inputs or node.inputs[0] is None:
        return None
    p = graph.producer(node.inputs[0])
    if p is None or p.kind != "Constant":
        return None
    v = np.asarray(p.weights["value"])
    return bool(v.reshape(-1)[0]) if v.size == 1 else None


def _produced(graph: Graph, skip) -> set:
    names = set(graph.input_names)
    for n in graph.nodes:
        if n is skip:
            continue
        names.update(n.outputs)
        for sub in n.subgraphs.values():
            names |= _produced(sub, None)
    return names


def inline_constant_ifs(graph: Graph, logger=None) -> int:
    """Replace every If of `graph` whose condition is a constant by its taken branch; returns how many. Nested
    bodies are visited too (an If inside a Loop body with a constant condition)."""
    count = 0
    for node in list(graph.nodes):
        cond = _condition(graph, node) if node.kind == "If" else None
        if cond is None:
            inner = sum(inline_constant_ifs(sub, logger) for sub in node.subgraphs.values())
            if inner:
                graph.touch()   # the bodies' reads from this graph may have changed
            count += inner
            continue
        branch = node.subgraphs["then" if cond else "else"]
        made = {o for n in branch.nodes for o in n.outputs}
        if made & _produced(graph, node) or branch.inputs:
            continue
        names = {n.name for n in graph.nodes if n is not node}
        body = []
        for n in branch.nodes:
            if n.name in names:   # layer names identify layers in replay files and reports: keep them unique
                n.name = f"{node.name}/{n.name}"
            body.append(n)
        binds = [Node(name=f"{node.name}/{out}", kind="Identity", inputs=[src], outputs=[out],
                      source_nodes=list(node.source_nodes))
                 for src, out in zip(branch.output_names, node.outputs)]
        for name, info in branch.tensor_info.items():
            graph.tensor_info.setdefault(name, info)
        graph.replace_nodes([node], body + binds)
        count += 1
        if logger is not None:
            logger.verbose(f"If '{node.name}': condition is the constant {cond}; its "
                           f"{'then' if cond else 'else'} branch ({len(body)} layers) runs inline")
    return count
