"""Shape folding: with every input shape fixed at build time, the shapes of most tensors are build-time constants.

When every optimization profile fixes its inputs (min == opt == max, as EngineRunner and the benchmark build), a
tensor's shape can still depend on data: NonZero, plugins (NMS, Unique...), sequences, Loop/If/Scan outputs, and any
layer whose output shape is taken from the *value* of an input that is not a build-time constant (Reshape dims,
Expand / Tile / Pad / Slice / Resize / Range / TopK-k / ConstantOfShape inputs). Everything else is "shape-static".
A Shape layer over a shape-static tensor is replaced by a Constant (its value observed in a run at the fixed
shapes); constant folding then evaluates the Gather / Concat / Unsqueeze / Cast / arithmetic chains that compute
reshape dims from it, and dead-layer elimination drops what no output needs (TensorRT computes shape tensors at
build time the same way). Reshape-style layers whose shape input became constant make their outputs shape-static in
turn, so the three steps repeat to a fixed point.

Staticness is propagated conservatively: only layer kinds in STATIC_KINDS can produce shape-static outputs, and only
when all their inputs are shape-static and their VALUE_INPUTS (inputs whose values decide the output shape) are
constants. With ranges in a profile (min != max) nothing is folded.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.fold import NOT_FOLDABLE, RANDOM_FILLS, fold_constants
from backends.engine.builder.passes.inline_if import inline_constant_ifs
from backends.engine.engine_graph import Graph, Node, TensorInfo
from backends.engine.runtime.executor import GraphExecutor
from native.logger import G_LOGGER

ALL = object()  # every input is a value input
_REST = tuple(range(1, 16))  # every input after the data input
# layer kind -> indices of inputs whose *values* decide the output shape (ALL: every input); kinds not listed
# never yield shape-static outputs
VALUE_INPUTS = {
    "Constant": (), "Identity": (), "Cast": (), "Shape": (), "Activation": (), "ElementWise": (), "Unary": (),
    "Select": (), "ArgReduce": (), "Softmax": (), "MatrixMultiply": (), "Einsum": (), "Convolution": (),
    "Deconvolution": (), "Pooling": (), "Normalization": (), "Scale": (), "LRN": (), "Quantize": (),
    "Dequantize": (), "Pointwise": (), "Attention": (), "ConvolutionNHWC": (), "PoolingNHWC": (),
    "Concatenation": (), "Gather": (), "Scatter": (), "RNN": (), "Cumulative": (),
    "Reduce": _REST, "Shuffle": _REST, "Slice": _REST, "Split": _REST, "Padding": _REST, "TopK": _REST,
    "OneHot": _REST, "Tile": _REST, "Expand": _REST, "Resize": _REST, "Fill": ALL, "Range": ALL,
}
STATIC_KINDS = frozenset(VALUE_INPUTS)
FOLD_MAX_BYTES = 1 << 24  # constants this pass creates stay small (shape tensors, masks, position ids)


def fixed_input_shapes(graph: Graph, config) -> dict | None:
    """{input name: shape} when every tensor input's shape is fixed by the profiles (or the model), else None."""
    profiles = list(config.profiles)
    shapes = {}
    for t in graph.inputs:
        if t.kind != "tensor":
            continue
        given = [p.get_shape(t.name) for p in profiles if p.get_shape(t.name) is not None]
        if given:
            if any(not (lo == opt == hi) for lo, opt, hi in given) or len({g[1] for g in given}) != 1:
                return None
            shapes[t.name] = tuple(given[0][1])
        elif t.shape is not None and all(d is not None and d >= 0 for d in t.shape):
            shapes[t.name] = tuple(t.shape)
        else:
            return None
    return shapes


def _foldable(node) -> bool:
    return (node.kind in VALUE_INPUTS and not node.subgraphs and node.kind not in NOT_FOLDABLE
            and str(node.params.get("op", "")) not in RANDOM_FILLS)


def shape_static_tensors(graph: Graph, fixed_inputs) -> set:
    """Names of tensors whose shape cannot depend on data, given fixed shapes for `fixed_inputs`."""
    static = {t.name for t in graph.inputs if t.kind == "tensor" and t.name in fixed_inputs}
    const = set()  # values known at build time: constants, shapes of static tensors, foldable math on those
    for node in graph.nodes:
        if node.kind == "Constant" or node.kind == "Shape" and node.inputs and node.inputs[0] in static:
            const.update(node.outputs)
            static.update(node.outputs)
            continue
        if _foldable(node) and all(i is None or i in const for i in node.inputs):
            const.update(node.outputs)
        vin = VALUE_INPUTS.get(node.kind)
        if vin is None or node.subgraphs:
            continue
        ins = [i for i in node.inputs if i is not None]
        if not all(i in static for i in ins):
            continue
        values = ins if vin is ALL else [node.inputs[k] for k in vin if k < len(node.inputs)]
        if all(v is None or v in const for v in values):
            static.update(node.outputs)
    return static


def _fold_shapes(graph: Graph, static: set, shapes_of: dict) -> int:
    n = 0
    for node in list(graph.nodes):
        if node.kind != "Shape" or not node.inputs or node.inputs[0] not in static:
            continue
        if node.inputs[0] not in shapes_of:
            continue
        shape = shapes_of[node.inputs[0]][0]
        s = np.array(shape, dtype=np.int64)
        start, end = node.params.get("start", 0) or 0, node.params.get("end")
        value = s[start:end] if end is not None else s[start:]
        graph.replace_nodes([node], Node(name=node.name, kind="Constant", inputs=[], outputs=[node.outputs[0]],
                                         params={"shape": list(value.shape)}, weights={"value": value},
                                         source_nodes=list(node.source_nodes), meta={"folded_from": "Shape"}))
        n += 1
    return n


_RESHAPE_PLUGINS = ("Squeeze", "Unsqueeze")


def _reshape_plugin(node) -> bool:
    """A Squeeze / Unsqueeze plugin with its axes known (one input)."""
    return node.kind == "Plugin" and node.params.get("plugin_type") in _RESHAPE_PLUGINS and len(node.inputs) == 1


def _plugins_as_reshapes(graph: Graph, static: set, shapes_of: dict) -> int:
    """Squeeze / Unsqueeze plugins (the parser's form when the input's rank was unknown at import, e.g. an If's
    output whose branches differ in rank) over a shape-static input become Shuffle layers to the observed shape:
    a reshape the fusions can merge, that returns a view, and whose output is shape-static in turn."""
    n = 0
    for node in list(graph.nodes):
        if not _reshape_plugin(node) or node.inputs[0] not in static or node.outputs[0] not in shapes_of:
            continue
        shape = [int(d) for d in shapes_of[node.outputs[0]][0]]
        graph.replace_nodes([node], Node(
            name=node.name, kind="Shuffle", inputs=list(node.inputs), outputs=list(node.outputs),
            params={"first_transpose": None, "reshape_dims": shape, "second_transpose": None,
                    "zero_is_placeholder": False}, source_nodes=list(node.source_nodes), meta=dict(node.meta)))
        n += 1
    return n


def observed_shapes(graph: Graph, feeds: dict, device="cpu") -> dict | None:
    """{tensor: shape} for every array a run of `graph` on `feeds` produces (None if the run fails)."""
    try:
        with np.errstate(all="ignore"):  # random feeds: fully masked rows and the like are expected
            env = GraphExecutor(graph, device, keep_all=True).run(feeds)
    except Exception as e:  # folding is an optimisation: a failing run just leaves the graph as it is
        G_LOGGER.verbose(f"shape folding: skipped, the run at the fixed shapes failed: {str(e)[:200]}")
        return None
    return {k: (v.shape, v.dtype.name) for k, v in env.items() if isinstance(v, np.ndarray)}


def structure_key(graph: Graph, feeds: dict, device) -> str:
    """A digest of what `observed_shapes` depends on: every layer's kind, wiring, params and weight shapes/dtypes,
    the feeds' shapes and dtypes, the device. Equal digests of graphs lowered from one network give equal shapes."""
    import hashlib
    import json
    h = hashlib.sha1()
    h.update(json.dumps([str(device), sorted((k, list(np.shape(v)), str(np.asarray(v).dtype)) for k, v in feeds.items())]
                        ).encode())
    for n in graph.nodes:
        h.update(json.dumps([n.kind, n.inputs, n.outputs, n.params,
                             sorted((k, list(np.shape(w)), str(getattr(w, "dtype", ""))) for k, w in n.weights.items()),
                             sorted(n.subgraphs)], sort_keys=True, default=str).encode())
    return h.hexdigest()


def fold_shapes(graph: Graph, config, feeds: dict, device="cpu", logger=None, memo: dict | None = None) -> int:
    """Fold Shape layers of shape-static tensors and what computes from them; returns the layers removed.
    `feeds` are inputs at the fixed shapes (their values do not matter). `memo`: observed shapes of earlier builds
    from the same network, by `structure_key` (a search rebuilding one model many times runs the graph once)."""
    logger = logger or G_LOGGER
    fixed = fixed_input_shapes(graph, config)
    if fixed is None or any(tuple(np.shape(feeds[k])) != s for k, s in fixed.items() if k in feeds):
        return 0
    if not any(n.kind == "Shape" or _reshape_plugin(n) for n in graph.nodes):
        return 0
    key = structure_key(graph, feeds, device) if memo is not None and not any(n.subgraphs for n in graph.nodes) \
        else None
    if key is not None and key in memo:
        shapes_of = memo[key]
    else:
        shapes_of = observed_shapes(graph, feeds, device)
        if key is not None:
            memo[key] = shapes_of
    if shapes_of is None:
        return 0
    before = len(graph.nodes)
    inlined = 0
    while True:
        static = shape_static_tensors(graph, fixed)
        n = _fold_shapes(graph, static, shapes_of) + _plugins_as_reshapes(graph, static, shapes_of)
        n += fold_constants(graph, config, device, max_bytes=FOLD_MAX_BYTES) if n or inlined else 0
        n += eliminate_dead_layers(graph, config)
        # an If whose condition folded runs its branch inline; the branch's tensors are then shaped by a new run
        inlined = inline_constant_ifs(graph, logger)
        if inlined:
            shapes_of = observed_shapes(graph, feeds, device) or shapes_of
        if not n and not inlined:
            break
    # the shapes of shape-static tensors are facts now: later passes (fusions) may rely on rank and dims
    for name in shape_static_tensors(graph, fixed):
        if name in shapes_of:
            shape, dtype = shapes_of[name]
            old = graph.tensor_info.get(name)
            graph.tensor_info[name] = TensorInfo(name, dtype, list(shape), dict(old.dim_names) if old else {})
    removed = before - len(graph.nodes)
    logger.verbose(f"shape folding: {before} → {len(graph.nodes)} layers")
    return removed
