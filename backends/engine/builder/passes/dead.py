"""Dead-layer elimination: drop nodes none of whose outputs reach a graph output."""
from backends.engine.engine_graph import Graph

SIDE_EFFECTS = {"Assertion"}


def eliminate_dead_layers(graph: Graph, config=None) -> int:
    live = set(graph.output_names)
    dead = []
    for node in reversed(graph.nodes):
        if node.kind in SIDE_EFFECTS or any(o in live for o in node.outputs):
            live |= {i for i in node.inputs if i is not None}
            for sub in node.subgraphs.values():
                eliminate_dead_layers(sub)
                live |= sub.outer_references()
        else:
            dead.append(node)
    if dead:
        graph.erase_nodes(dead)   # refused if a dead layer's output were still read: the analysis would be wrong
    return len(dead)
