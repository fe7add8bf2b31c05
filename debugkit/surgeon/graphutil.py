"""Small helpers over ONNX graphs: who produces and reads each tensor, subgraph outer references, renaming.

ONNX control-flow bodies (If/Loop/Scan attributes) may read tensors of the enclosing graph by name; every
helper here treats those reads as inputs of the node that owns the body, so dead-code removal and sorting
never drop or misplace a producer a body still needs.
"""
from __future__ import annotations

import onnx


BODY_OPS = {"If", "Loop", "Scan", "SequenceMap"}  # default-domain ops that carry graph attributes


def subgraphs(node) -> list:
    """The GraphProto attributes of a node (If branches, Loop/Scan bodies)."""
    out = []
    if not node.attribute or (node.op_type not in BODY_OPS and node.domain in ("", "ai.onnx")):
        return out
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def outer_references(graph) -> set:
    """Names a graph reads but does not define (inputs, initializers or its own nodes' outputs)."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    used = set()
    for node in graph.node:
        used |= {n for n in node.input if n}
        for sub in subgraphs(node):
            used |= outer_references(sub)
        defined |= set(node.output)
    used |= {o.name for o in graph.output}
    return used - defined


def node_reads(node) -> list:
    """Every tensor a node reads: its inputs plus what its subgraphs take from outside."""
    names = [n for n in node.input if n]
    for sub in subgraphs(node):
        names.extend(sorted(outer_references(sub) - set(names)))
    return names


def producers(graph) -> dict:
    return {o: n for n in graph.node for o in n.output if o}


def consumers(graph) -> dict:
    users: dict = {}
    for node in graph.node:
        for name in node_reads(node):
            users.setdefault(name, []).append(node)
    return users


def node_label(node, index=None) -> str:
    """A node's name; an unnamed node is named by its op type and first output (stable across passes)."""
    if node.name:
        return node.name
    out = next((o for o in node.output if o), None)
    return f"{node.op_type}->{out}" if out else (f"{node.op_type}_{index}" if index is not None else node.op_type)


def rename_input_everywhere(graph, old: str, new: str):
    """Make every reader of `old` (including bodies that read it from outside) read `new` instead."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in subgraphs(node):
            if old in outer_references(sub):
                rename_input_everywhere(sub, old, new)


def apply_renames(graph, mapping: dict):
    """Make every reader of a name in `mapping` read its (chain-resolved) new name, bodies included."""
    if not mapping:
        return

    def resolve(name):
        seen = 0
        while name in mapping and seen < 1000:
            name, seen = mapping[name], seen + 1
        return name

    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = resolve(name)
        for sub in subgraphs(node):
            apply_renames(sub, mapping)


def graph_defines(graph, name) -> bool:
    return (any(i.name == name for i in graph.input) or any(i.name == name for i in graph.initializer)
            or any(name in n.output for n in graph.node))


def tensor_types(graph) -> dict:
    """name -> TypeProto from graph inputs, outputs and value_info (not initializers)."""
    types = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    return types


def static_shape(tp):
    """A TypeProto's tensor shape as a list with None for unknown dims, or None if there is no shape."""
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]


def elem_type(tp):
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return 0
    return tp.tensor_type.elem_type


def count_nodes(graph, recursive=False) -> int:
    n = len(graph.node)
    if recursive:
        n += sum(count_nodes(s, True) for node in graph.node for s in subgraphs(node))
    return n
