"""Precision assignment: the compute precision each node runs in, from builder flags and layer constraints."""


def assign_precision(graph, config, logger) -> int:
    for node in graph.walk():
        node.precision = node.meta.get("precision_constraint") or "float32"
    return 0
