"""Precision assignment: the compute precision each node runs in, from builder flags and layer constraints.

Reduced-precision tactics (FP16, INT8) are not implemented on any device yet, so FP16/INT8 flags currently leave
every layer in FP32 — which TensorRT's semantics allow ("the builder may still choose FP32") — and the builder says
so out loud rather than letting a user believe an FP16 engine was built.
"""
from backends.engine.builder.config import BuilderFlag


def assign_precision(graph, config, logger) -> int:
    for node in graph.walk():
        if node.precision != "int8":  # INT8 layers were chosen by passes/int8.py
            node.precision = node.meta.get("precision_constraint") or "float32"
    wanted = [f.name for f in (BuilderFlag.FP16,) if config.get_flag(f)]
    if wanted:
        logger.warning(f"{'/'.join(wanted)} requested, but device '{config.device}' has no reduced-precision "
                       f"tactics yet: every layer runs in FP32")
    return 0
