"""Evaluate a set of ONNX nodes whose inputs are all constants with OUR engine (parser + lowering + CPU kernels).

The nodes are imported in one go into a NetworkDefinition by our ONNX parser, lowered to the builder's Graph and
run layer by layer with each layer's default tactic (no timing). Unlike the runtime's executor this loop is
tolerant: a node that cannot be imported (no importer yet), has no kernel, or whose kernel raises is recorded as
a failure by its ONNX name, and only the nodes that depend on it are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from native.logger import G_LOGGER


@dataclass
class EvalResult:
    values: dict = field(default_factory=dict)      # ONNX tensor name -> numpy array / list / None
    failures: dict = field(default_factory=dict)    # ONNX node label -> reason (root causes only)
    skipped: dict = field(default_factory=dict)     # ONNX node label -> reason (downstream of a failure)


def _is_consequence(reason: str) -> bool:
    return "is not produced by any earlier node" in reason


def evaluate_nodes(model, nodes, constants: dict, wanted: set, value_types: dict, device="cpu") -> EvalResult:
    """Run `nodes` (ONNX NodeProtos, topologically sorted) given `constants` (name -> TensorProto) and return the
    values of the tensors in `wanted` that could be computed."""
    from backends.engine.builder.lower import lower
    from backends.engine.network import NetworkDefinition
    from backends.engine.onnx_parser.parser import ImportContext, import_graph

    result = EvalResult()
    if not nodes:
        return result
    from debugkit.surgeon.graphutil import node_label
    graph = onnx.GraphProto(name="fold")
    graph.node.extend(nodes)
    for node in graph.node:
        if not node.name:
            node.name = node_label(node)
    graph.initializer.extend(constants.values())
    for name in sorted(wanted):
        graph.output.append(onnx.ValueInfoProto(name=name))
    opsets = {}
    for imp in model.opset_import:
        opsets["" if imp.domain in ("", "ai.onnx") else imp.domain] = imp.version
    opsets.setdefault("", 1)

    network = NetworkDefinition("fold")
    ctx = ImportContext(network, opsets, value_types)
    errors = import_graph(ctx, graph)
    for err in errors:
        if err.op_type == "output":
            continue
        (result.skipped if _is_consequence(err.reason) else result.failures)[err.node] = err.reason
    # outputs nobody could produce were reported above; lower what was imported
    try:
        g = lower(network)
    except Exception as e:  # pragma: no cover - lowering is plain data copying
        for n in nodes:
            result.failures.setdefault(n.name or n.op_type, f"lowering failed: {e}")
        return result
    env, failed_sources = _run_tolerant(g, device, result)
    for name in wanted:
        key = name
        seen = set()
        while key not in env and key in g.aliases and key not in seen:
            seen.add(key)
            key = g.aliases[key]
        if key in env:
            result.values[name] = env[key]
    return result


def _run_tolerant(g, device, result: EvalResult):
    """Run the lowered graph with the engine's interpreter in tolerant mode: a failing layer is recorded against
    its ONNX node and only what depends on it is skipped."""
    from backends.engine.runtime.executor import GraphExecutor, Skipped

    failed_sources = set()

    def on_error(node, error):
        source = node.source_nodes[0] if node.source_nodes else node.name
        if isinstance(error, Skipped):
            if source not in result.failures:
                result.skipped.setdefault(source, f"reads [{error.tensor!r}], which could not be folded")
        else:
            e = error
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e) else type(e).__name__
            result.failures[source] = f"layer '{node.name}' ({node.kind}): {reason}"
            G_LOGGER.verbose(f"fold: '{source}' failed in layer '{node.name}' ({node.kind}): {reason}")
        failed_sources.add(source)

    with np.errstate(all="ignore"):
        env = GraphExecutor(g, device, keep_all=True, lazy_tactics=True).run({}, on_error=on_error)
    return env, failed_sources
