"""Where NaN/Inf is born: the first observed tensor that holds one, and inside a fused region, the ONNX node.

The engine exposes only a fused region's output, so the first non-finite tensor it shows may be several ONNX nodes
downstream of the node that made the NaN (a Log fused into a pointwise chain). The region is re-evaluated node by
node with onnx's reference evaluator, from the engine's own (finite) values at the region's inputs, and the first
node whose output is not finite is named.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from debugkit.compare.funcs import validate


@dataclass
class NonFinite:
    """The first tensor (in ONNX topological order) of one source that holds NaN or Inf."""

    source: str
    iteration: int
    tensor: str
    node: str | None                # ONNX node that produced the first non-finite value
    op_type: str | None
    problems: list
    region: list = field(default_factory=list)   # ONNX nodes fused with it (when the engine showed a later tensor)
    observed_tensor: str | None = None           # the tensor the engine showed (the region's output)

    def headline(self) -> str:
        where = f"node '{self.node}' ({self.op_type})" if self.node else "a graph input"
        text = f"first NaN/Inf in {self.source}: tensor '{self.tensor}' ({', '.join(self.problems)}), made by {where}"
        if self.observed_tensor and self.observed_tensor != self.tensor:
            text += (f"; found by re-running the fused region {self.region} node by node from its inputs (the engine "
                     f"shows only '{self.observed_tensor}')")
        return text


def fused_region(model, tensor, observed) -> tuple[list, list]:
    """(nodes in topological order, boundary tensors) between `tensor` and the nearest observed tensors, constants
    or graph inputs."""
    from backends.runners.model import topological_nodes
    order = topological_nodes(model.graph)
    producer = {o: n for n in order for o in n.output if o}
    stop = set(observed) | {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    region, boundary, stack, seen = set(), [], [tensor], set()
    while stack:
        t = stack.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        node = producer.get(t)
        if (t in stop and t != tensor) or node is None:
            boundary.append(t)
            continue
        region.add(node.name)
        stack.extend(node.input)
    return [n for n in order if n.name in region], boundary


def locate(model, source_name, iteration, tensor, problems, observed, fetch) -> NonFinite:
    """Name the ONNX node that first made a NaN/Inf, given the first observed non-finite `tensor`.
    fetch(names) -> {name: value} gives the source's values of observed tensors and graph inputs."""
    from backends.runners.model import topological_nodes
    producer = {o: n for n in topological_nodes(model.graph) for o in n.output if o} if model is not None else {}
    node = producer.get(tensor)
    result = NonFinite(source_name, iteration, tensor, node.name if node else None, node.op_type if node else None,
                       problems)
    if model is None or node is None:
        return result
    nodes, boundary = fused_region(model, tensor, observed)
    if len(nodes) < 2:
        return result
    try:
        first = _replay(model, nodes, boundary, fetch)
    except Exception:   # the replay is a refinement; the observed tensor is still the honest answer
        return result
    if first is not None:
        n, out, probs = first
        result.tensor, result.node, result.op_type, result.problems = out, n.name, n.op_type, probs
        result.region, result.observed_tensor = [x.name for x in nodes], tensor
    return result


def _replay(model, nodes, boundary, fetch):
    from debugkit.compare import replay
    env = replay.constants(model, boundary)
    env.update(fetch([t for t in boundary if t not in env]))
    found = []

    def stop(n, o, v):
        probs = validate(o, v)
        if probs:
            found.append((n, o, probs))
        return bool(probs)
    replay.evaluate(model, nodes, env, stop)
    return found[0] if found else None
