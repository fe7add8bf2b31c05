"""Replace the subgraph between given tensors by one node (`surgeon insert`)."""
from __future__ import annotations

import ast

import numpy as np
import onnx

from debugkit.surgeon.cleanup import cleanup_graph
from debugkit.surgeon.graphutil import producers
from debugkit.surgeon.toposort import toposort_graph
from native.errors import UsageError


def parse_attrs(items) -> dict:
    """`["alpha=0.5", "perm=[0,2,1]", "mode=linear"]` -> {"alpha": 0.5, "perm": [0, 2, 1], "mode": "linear"}."""
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"bad attribute '{item}': expected KEY=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        out[key] = value
    return out


def insert_node(model, inputs, outputs, op_type, name=None, domain="", attrs=None) -> int:
    """Make one `op_type` node read `inputs` and produce `outputs`; the nodes that used to produce the outputs
    and no longer feed anything are removed. Returns the number of nodes removed."""
    graph = model.graph
    prod = producers(graph)
    known = set(prod) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    missing = [n for n in list(inputs) + list(outputs) if n and n not in known]
    if missing:
        raise UsageError(f"tensors {missing} are not in the model")
    before = len(graph.node)
    for out in outputs:
        p = prod.get(out)
        if p is not None:
            p.output[list(p.output).index(out)] = f"{out}__replaced_by_{name or op_type}"
        elif out in {i.name for i in graph.input}:
            raise UsageError(f"'{out}' is a graph input; a node cannot produce it")
    attrs = {k: (np.asarray(v) if isinstance(v, list) and v and isinstance(v[0], list) else v)
             for k, v in (attrs or {}).items()}
    try:
        node = onnx.helper.make_node(op_type, list(inputs), list(outputs), name=name or f"{op_type}_inserted",
                                     domain=domain or None, **attrs)
    except Exception as e:
        raise UsageError(f"cannot make a '{op_type}' node with attributes {attrs}: {e}") from None
    graph.node.append(node)
    if domain and not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(domain, 1))
    toposort_graph(graph)
    cleanup_graph(graph, remove_unused_inputs=False)
    return before + 1 - len(graph.node)
