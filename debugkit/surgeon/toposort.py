"""Topological sort of a graph's nodes, stable (keeps the given order wherever the dependencies allow)."""
from __future__ import annotations

import heapq

from debugkit.surgeon.graphutil import node_label, node_reads, subgraphs
from native.errors import ModelError


def toposort_graph(graph, recurse=True) -> bool:
    """Sort `graph.node` in place (and bodies of control-flow nodes); returns whether the order changed.

    Raises ModelError naming the nodes on a cycle or reading tensors nobody produces (after sorting).
    """
    nodes = list(graph.node)
    producer = {}
    for i, node in enumerate(nodes):
        for o in node.output:
            if o:
                producer[o] = i
    deps = [set() for _ in nodes]
    users = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for name in node_reads(node):
            j = producer.get(name)
            if j is not None and j != i and j not in deps[i]:
                deps[i].add(j)
                users[j].append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, n in enumerate(pending) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [node_label(nodes[i], i) for i in range(len(nodes)) if pending[i] > 0]
        raise ModelError(f"graph '{graph.name}' has a cycle; nodes on or behind it: {stuck[:10]}")
    changed = order != list(range(len(nodes)))
    if changed:
        sorted_nodes = [nodes[i] for i in order]
        del graph.node[:]
        graph.node.extend(sorted_nodes)
    if recurse:
        for node in graph.node:
            for sub in subgraphs(node):
                changed |= toposort_graph(sub, True)
    return changed
