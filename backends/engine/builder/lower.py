"""Lower a NetworkDefinition (the user's object, never mutated) into the builder's working Graph."""
from __future__ import annotations

import copy

from backends.engine.engine_graph import Graph, Node, TensorInfo


def tensor_info(t) -> TensorInfo:
    return TensorInfo(t.name, t.dtype.value if t.dtype is not None else None,
                      list(t.shape) if t.shape is not None else None, dict(t.dim_names), t.kind)


def lower(network) -> Graph:
    g = Graph(name=network.name)
    g.inputs = [tensor_info(t) for t in network.inputs]
    g.outputs = [tensor_info(t) for t in network.outputs]
    g.aliases = dict(network.aliases)
    for t in network.tensors.values():
        if t.dtype is not None or t.shape is not None:
            g.tensor_info[t.name] = tensor_info(t)
    nodes = []
    for layer in network.layers:
        node = Node(name=layer.name, kind=layer.kind,
                    inputs=[t.name if t is not None else None for t in layer.inputs],
                    outputs=[t.name for t in layer.outputs],
                    params=copy.deepcopy(layer.params), weights=dict(layer.weights),
                    subgraphs={k: lower(sub) for k, sub in layer.subgraphs.items()},
                    source_nodes=list(layer.source_nodes))
        if layer.precision is not None:
            node.meta["precision_constraint"] = layer.precision.value
        if layer.output_types:
            node.meta["output_types"] = {i: d.value for i, d in layer.output_types.items()}
        nodes.append(node)
    g.set_nodes(nodes)
    return g
