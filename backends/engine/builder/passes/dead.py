"""Dead-layer elimination: drop nodes none of whose outputs reach a graph output."""
from backends.engine.engine_graph import Graph

SIDE_EFFECTS = {"Assertion"}


def eliminate_dead_layers(graph: Graph, config=None) -> int:
    live = set(graph.output_names)
    kept, removed = [], 0
    for node in reversed(graph.nodes):
        if node.kind in SIDE_EFFECTS or any(o in live for o in node.outputs):
            kept.append(node)
            live |= {i for i in node.inputs if i is not None}
            for sub in node.subgraphs.values():
                eliminate_dead_layers(sub)
                live |= sub.outer_references()
        else:
            removed += 1
    graph.nodes = kept[::-1]
    return removed
