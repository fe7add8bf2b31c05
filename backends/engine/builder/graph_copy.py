"""A copy of a builder Graph that later passes can rewrite without touching the original: nodes, wiring, params,
meta and tensor facts are copied; weight arrays are shared (passes replace weights, they never write into them)."""
from __future__ import annotations

from backends.engine.engine_graph import Graph


def copy_graph(graph: Graph) -> Graph:
    nodes = [_clone(n, inputs=list(n.inputs), outputs=list(n.outputs), params=_tree(n.params),
                    weights=dict(n.weights), subgraphs={k: copy_graph(s) for k, s in n.subgraphs.items()},
                    source_nodes=list(n.source_nodes), meta=_tree(n.meta))
             for n in graph.nodes]
    return Graph(name=graph.name, inputs=[_info(t) for t in graph.inputs], outputs=[_info(t) for t in graph.outputs],
                 nodes=nodes, aliases=dict(graph.aliases),
                 tensor_info={k: _info(v) for k, v in graph.tensor_info.items()}, meta=_tree(graph.meta))


def _clone(obj, **changes):
    """dataclasses.replace for the graph's plain dataclasses (every field in __init__, no __post_init__), without
    its per-call field introspection: a probe copies ~900 nodes and tensor facts."""
    new = object.__new__(type(obj))
    d = new.__dict__
    d.update(obj.__dict__)
    d.update(changes)
    return new


def _info(t):
    return _clone(t, shape=None if t.shape is None else list(t.shape), dim_names=dict(t.dim_names))


def _tree(v):
    """Dicts and lists copied all the way down (passes edit them in place); everything else (numbers, strings,
    tuples, arrays) shared: copy.deepcopy of every layer's params was a tenth of a precision probe's build."""
    if isinstance(v, dict):
        return {k: (_tree(x) if isinstance(x, _NESTED) else x) for k, x in v.items()}
    if isinstance(v, list):
        return [(_tree(x) if isinstance(x, _NESTED) else x) for x in v]
    return v


_NESTED = (dict, list)
