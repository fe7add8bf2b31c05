"""Dead-code removal: nodes whose outputs nobody reads, unused graph inputs, initializers and value_info."""
from __future__ import annotations

from dataclasses import dataclass

from debugkit.surgeon.graphutil import node_reads, outer_references, subgraphs


@dataclass
class CleanupStats:
    nodes: int = 0
    inputs: int = 0
    initializers: int = 0
    value_info: int = 0

    def __iadd__(self, other):
        self.nodes += other.nodes
        self.inputs += other.inputs
        self.initializers += other.initializers
        self.value_info += other.value_info
        return self


def cleanup_graph(graph, remove_unused_inputs=True, recurse=True, is_subgraph=False) -> CleanupStats:
    """Remove, in place, every node that does not contribute to a graph output (or to what an enclosing graph
    reads from this body), then initializers, inputs and value_info that nothing uses any more.

    Graph inputs of bodies (If/Loop/Scan) are positional and never removed.
    """
    stats = CleanupStats()
    if recurse:
        for node in graph.node:
            for sub in subgraphs(node):
                stats += cleanup_graph(sub, remove_unused_inputs, True, is_subgraph=True)
    live = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o and o in live for o in node.output):
            keep.append(node)
            live.update(node_reads(node))
    keep.reverse()
    stats.nodes += len(graph.node) - len(keep)
    if stats.nodes or len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)
    used = set(live)
    inits = [t for t in graph.initializer if t.name in used]
    stats.initializers += len(graph.initializer) - len(inits)
    if len(inits) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(inits)
    sparse = [t for t in graph.sparse_initializer if t.values.name in used]
    if len(sparse) != len(graph.sparse_initializer):
        del graph.sparse_initializer[:]
        graph.sparse_initializer.extend(sparse)
    if remove_unused_inputs and not is_subgraph:
        inputs = [i for i in graph.input if i.name in used]
        stats.inputs += len(graph.input) - len(inputs)
        if len(inputs) != len(graph.input):
            del graph.input[:]
            graph.input.extend(inputs)
    defined = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    vis = [v for v in graph.value_info if v.name in defined]
    stats.value_info += len(graph.value_info) - len(vis)
    if len(vis) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(vis)
    return stats


def unused_inputs(graph) -> list:
    """Names of graph inputs that no node or output reads (they do not affect the outputs)."""
    live = {o.name for o in graph.output}
    for node in reversed(graph.node):
        if any(o and o in live for o in node.output):
            live.update(node_reads(node))
    return [i.name for i in graph.input if i.name not in live and i.name not in {t.name for t in graph.initializer}]


__all__ = ["cleanup_graph", "CleanupStats", "unused_inputs", "outer_references"]
