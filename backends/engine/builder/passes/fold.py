"""Constant folding: evaluate, at build time and with our own kernels, every node whose inputs are constants
(and Shape nodes whose input shape is static), replacing it with Constant nodes."""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.engine_graph import Graph, Node
from backends.engine.runtime.executor import GraphExecutor, Skipped
from native.logger import G_LOGGER

NOT_FOLDABLE = {"Constant", "Assertion", "Loop", "If", "Scan"}
RANDOM_FILLS = {"RANDOM_UNIFORM", "RANDOM_NORMAL", "RANDOM_UNIFORM_LIKE", "RANDOM_NORMAL_LIKE", "MULTINOMIAL",
                "BERNOULLI"}
MAX_FOLD_BYTES = 1 << 28


def _static_shape(graph: Graph, name):
    info = graph.tensor_info.get(name)
    if info is None or info.shape is None or info.kind != "tensor":
        return None
    if any(d is None or d < 0 for d in info.shape):
        return None
    return info.shape


def _foldable(node) -> bool:
    return (node.kind not in NOT_FOLDABLE and not node.subgraphs and node.kind != "Plugin"
            and str(node.params.get("op", "")) not in RANDOM_FILLS)


def fold_constants(graph: Graph, config=None, device="cpu", max_bytes=MAX_FOLD_BYTES) -> int:
    """Replace every layer whose inputs are build-time constants (and Shape layers of statically shaped tensors)
    by Constant layers holding its outputs. The values come from the engine's interpreter (tolerant mode: a layer
    that cannot run, or reads a non-constant, simply stays) on `device`: the pipeline passes the CPU reference
    device (PassContext.reference_device), whatever the engine's target."""
    feeds = {}
    runnable = []
    known = set()   # tensors whose values are build-time constants: only layers reading nothing else are run
    for node in graph.nodes:
        if node.kind == "Shape" and node.inputs:   # a statically shaped input: known without running anything
            shape = _static_shape(graph, node.inputs[0])
            if shape is not None:
                s = np.array(shape, dtype=np.int64)
                start, end = node.params.get("start", 0) or 0, node.params.get("end")
                feeds[node.outputs[0]] = s[start:end] if end is not None else s[start:]
                known.add(node.outputs[0])
        if node.kind == "Constant" or (_foldable(node) and (node.outputs[0] in feeds or
                                                            all(not i or i in known for i in node.inputs))):
            runnable.append(node)
            known.update(node.outputs)
    if not any(n.kind != "Constant" for n in runnable) and not any(n.subgraphs for n in graph.nodes):
        return 0      # nothing to fold: no layer to run

    def skip(node, error):
        if not isinstance(error, Skipped):
            G_LOGGER.verbose(f"constant folding: left '{node.name}' ({node.kind}) unfolded: {error}")

    sub = Graph(name=graph.name, nodes=runnable, tensor_info=graph.tensor_info)
    env = GraphExecutor(sub, device, keep_all=True, lazy_tactics=True).run(dict(feeds), on_error=skip)
    folded = 0
    for node in list(graph.nodes):
        values = None
        if node.kind != "Constant" and _foldable(node) and all(o in env for o in node.outputs):
            values = [np.asarray(env[o]) if isinstance(env[o], np.generic) else env[o] for o in node.outputs]
            if any(not isinstance(v, np.ndarray) or v.nbytes > max_bytes for v in values):
                values = None
        if values is None:
            continue
        folded += 1
        graph.replace_nodes([node], [
            Node(name=node.name if i == 0 else f"{node.name}/{i}", kind="Constant", inputs=[], outputs=[name],
                 params={"shape": list(np.shape(v))}, weights={"value": v}, source_nodes=list(node.source_nodes),
                 meta={"folded_from": node.kind}) for i, (name, v) in enumerate(zip(node.outputs, values))])
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            folded += fold_constants(sub, config, device, max_bytes)
    return folded


# layer kind -> the weight names its input slots 1.. take when those inputs are build-time constants
_WEIGHT_SLOTS = {"Convolution": ("kernel", "bias"), "Deconvolution": ("kernel", "bias"), "MatrixMultiply": ("b",)}


def absorb_constant_weights(graph: Graph, config=None) -> int:
    """Move constant kernel/bias/right-operand inputs into `weights`, where tactics can pre-pack them at build time.

    The parser does this for operands that are constants at import; operands that only became constants by
    folding (weights behind an Identity or Transpose, as timm and many exporters emit) would otherwise reach the
    kernel as inputs and be re-packed on every call. Integer convolutions keep their (zero-point) inputs."""
    consts = {n.outputs[0]: n.weights["value"] for n in graph.nodes if n.kind == "Constant"}
    count = 0
    for node in graph.nodes:
        slots = _WEIGHT_SLOTS.get(node.kind)
        # fused steps that read an input by its index (a residual add) would lose it; a bias reads weights
        reads_inputs = any("input" in step for step in node.params.get("post_ops") or ())
        if slots is None or node.params.get("integer") or reads_inputs \
                or any(s in node.weights for s in slots) or len(node.inputs) > len(slots) + 1:
            continue
        extra = node.inputs[1:]
        if not extra or any(name is not None and name not in consts for name in extra):
            continue
        for slot, name in zip(slots, extra):
            if name is not None:
                node.weights[slot] = consts[name]
        graph.set_inputs(node, node.inputs[:1])
        count += 1
    return count


# layer kind -> the params its constant operand inputs 1.. become (every one present must be a constant)
_OPERAND_PARAMS = {"Slice": ("starts", "ends", "axes", "steps"), "Padding": ("pads", "value", "axes"),
                   "Split": ("split",)}


def absorb_constant_operands(graph: Graph, config=None) -> int:
    """Slice starts / ends / axes / steps, Padding pads / value / axes and Split sizes given as constant inputs
    (ONNX opset 10+ / 11+ / 13+ form) become the layer's params (the older form), as the parser makes them from
    attributes: the kernel
    reads lists it does not convert per call, and the layer reads one tensor. Nested bodies included."""
    count = 0
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            count += absorb_constant_operands(sub, config)
        names = _OPERAND_PARAMS.get(node.kind)
        if names is None or len(node.inputs) < 2 or len(node.inputs) > len(names) + 1:
            continue
        values = {}
        for key, name in zip(names, node.inputs[1:]):
            if name is None:
                continue
            p = graph.producer(name)
            v = np.asarray(p.weights["value"]) if p is not None and p.kind == "Constant" else None
            if v is None or (key == "value" and (v.dtype.kind != "f" or v.size != 1)) or \
                    (key != "value" and v.dtype.kind not in "iu"):
                break
            values[key] = float(v.reshape(-1)[0]) if key == "value" else [int(x) for x in v.reshape(-1)]
        else:
            if not all(k in values or node.params.get(k) is not None for k in names[:1 if node.kind == "Padding"
                                                                                  else 2]):
                continue   # (a required operand absent: left for the kernel to report)
            node.params.update(values)
            graph.set_inputs(node, node.inputs[:1])
            count += 1
    return count


def constants_into_bodies(graph: Graph, outer: dict | None = None) -> int:
    """Give every If / Loop / Scan body a Constant layer of its own for each constant of an enclosing graph it
    reads (same name, same array), and the enclosing graph's type facts of every tensor it reads from there, so
    that folding, weight absorption and the fusions inside the body see the value (a LayerNorm's gamma, an LSTM's weights sliced per gate) and the body binds it once instead of reading
    it from the enclosing scope per run. Returns the Constant layers added; the enclosing graph's copy goes when
    dead-layer elimination finds no other reader (a plan stores an array shared by several layers once)."""
    consts = dict(outer or {})
    consts.update({n.outputs[0]: n for n in graph.nodes if n.kind == "Constant" and not n.subgraphs})
    count = 0
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            own = set(sub.input_names) | {o for n in sub.nodes for o in n.outputs}
            for name in sorted(sub.outer_references()):
                if name in graph.tensor_info:      # what the enclosing graph knows of it (dtype, rank)
                    sub.tensor_info.setdefault(name, graph.tensor_info[name])
                c = consts.get(name)
                if c is None or name in own or not sub.nodes:
                    continue
                sub.insert_before(sub.nodes[0], Node(
                    name=c.name, kind="Constant", inputs=[], outputs=[name], params=dict(c.params),
                    weights=dict(c.weights), source_nodes=list(c.source_nodes), meta=dict(c.meta)))
                count += 1
            if constants_into_bodies(sub, consts):
                count += 1
                eliminate_dead_layers(sub)   # copies only its own bodies read: each has one of its own now
    if count:
        graph.touch()   # its nodes' bodies read other outer names now: the use-def index is rebuilt
    return count
