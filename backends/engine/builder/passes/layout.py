"""Layout pass (seed 004, OneFlow's AutoNhwc): NCHW → NHWC for convolution regions where the device prefers it.

1. Insertion (greedy, in topological order): every NHWC-capable op — a 2-D Convolution with constant weights
   (groups 1), a 2-D MAX/AVERAGE/global Pooling without ceil mode — becomes its NHWC twin (ConvolutionNHWC /
   PoolingNHWC) wrapped in transposes: `<op>_transpose_input_<i>` with perm [0,2,3,1] on each operand to
   transpose (data input and residual-add inputs, never the bias) and `<op>_transpose_output_0` with perm
   [0,3,1,2] on its output. A layout-agnostic op (Activation, ElementWise, Pointwise, Unary) is wrapped too
   when one of its 4-D inputs comes from a [0,3,1,2] transpose, maximising the pairs for step 2; its 4-D
   constant operands are transposed at build time, scalar ones kept.
2. Elimination to fixpoint: a transpose reading a transpose whose perms compose to the identity is removed.
3. Weight transposes are done here, at build time (kernel stored as [KH*KW*C, M]); no run-time cost.

Enabled when `config.prefer_nhwc` is True, or, when that is None, when the device class says
`prefers_nhwc = True`. The CPU default is NCHW (see docs/PERFORMANCE.md for the measurement).
BuilderFlag.DISABLE_LAYOUT turns the pass off. Transpose counts before and after are logged.

Timed (a device that `chooses_by_timing`, CUDA, with `config.prefer_nhwc` None): the conversion is first made on
a copy of the graph; each NHWC region there (converted layers connected through tensors, with the transposes left
at its edges) is timed against the same layers in NCHW (builder/timed_choice.py: best tactic per layer, in the
precision the device's rule would give it, through the timing cache), and only the regions whose NHWC plan is
faster are converted in the graph. A replay file's recorded layer kinds decide instead where it has them.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.fusion_util import View
from backends.engine.builder.timed_choice import chooses_by_timing
from backends.engine.engine_graph import Node

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
AGNOSTIC = {"Activation", "ElementWise", "Pointwise", "Unary"}


def prefers_nhwc(config) -> bool:
    explicit = getattr(config, "prefer_nhwc", None)
    if explicit is not None:
        return bool(explicit)
    try:
        from native.device import get_device
        return bool(getattr(get_device(getattr(config, "device", "cpu")), "prefers_nhwc", False))
    except Exception:
        return False


def is_transpose(n, perm=None):
    ok = n is not None and n.kind == "Shuffle" and n.params.get("first_transpose") is not None and \
        n.params.get("reshape_dims") is None and n.params.get("second_transpose") is None and \
        len([i for i in n.inputs if i is not None]) == 1
    return ok and (perm is None or list(n.params["first_transpose"]) == list(perm))


def count_transposes(graph) -> int:
    return sum(1 for n in graph.nodes if is_transpose(n) and
               list(n.params["first_transpose"]) != list(range(len(n.params["first_transpose"]))))


def _transpose_node(view, name, src, perm, base):
    out = view.unique(base)
    return Node(name=view.unique(name), kind="Shuffle", inputs=[src], outputs=[out],
                params={"first_transpose": list(perm), "reshape_dims": None, "second_transpose": None,
                        "zero_is_placeholder": True}, meta={"layout": "reformat"})


def _conv_eligible(view, n):
    if n.kind != "Convolution" or n.params.get("integer") or len(n.params.get("kernel_shape") or []) != 2:
        return None
    if n.params.get("side"):   # a merged shortcut convolution (fusion_shortcut.py): NCHW kernels only
        return None
    if n.params.get("groups", 1) != 1 or n.params.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", None):
        return None
    if view.rank(n.inputs[0]) != 4:
        return None
    k = n.weights.get("kernel")
    b = n.weights.get("bias")
    if k is None and len(n.inputs) > 1:
        k = view.const(n.inputs[1])
        if len(n.inputs) > 2 and n.inputs[2] is not None:
            b = view.const(n.inputs[2])
            if b is None:
                return None
    if k is None or np.asarray(k).ndim != 4 or np.asarray(k).dtype.kind != "f":
        return None
    return np.asarray(k), b


def _pool_eligible(view, n):
    p = n.params
    if n.kind != "Pooling" or len(n.outputs) != 1 or view.rank(n.inputs[0]) != 4 or p.get("type") not in ("MAX", "AVERAGE"):
        return False
    if p.get("global"):
        return True
    return len(p.get("window") or []) == 2 and not p.get("ceil_mode") and \
        p.get("auto_pad", "NOTSET") in ("NOTSET", "VALID", None) and all(d == 1 for d in (p.get("dilations") or [1, 1]))


def _agnostic_eligible(view, n, from_nchw_transpose):
    """Operand indices to transpose for a layout-agnostic op, or None."""
    if n.kind not in AGNOSTIC or len(n.outputs) != 1 or view.rank(n.outputs[0]) != 4:
        return None
    if n.kind == "Activation" and len(n.inputs) != 1:
        return None
    idx, hit = [], False
    for i, name in enumerate(n.inputs):
        if name is None:
            continue
        c = view.const(name)
        if c is not None and (c.size == 1 or c.ndim == 4):
            continue
        if view.rank(name) != 4:
            return None
        idx.append(i)
        hit = hit or from_nchw_transpose(name)
    return idx if hit else None


def run_layout(graph, config, logger, ctx=None) -> int:
    timed = ctx is not None and getattr(config, "prefer_nhwc", None) is None and chooses_by_timing(config)
    if not timed and not prefers_nhwc(config):
        return 0
    before = count_transposes(graph)
    skip, chosen = set(), {}
    if timed:
        decided = _timed_regions(graph, config, logger, ctx)
        if decided is None and not prefers_nhwc(config):
            return 0
        if decided is not None:
            skip, chosen = decided
    converted = len(_convert(graph, skip))
    for n in graph.nodes:
        if n.name in chosen:
            n.meta["layout_ms"] = chosen[n.name]
    view = View(graph)
    removed = _eliminate_pairs(graph, view)
    eliminate_dead_layers(graph, config)
    after = count_transposes(graph)
    logger.info(f"layout: {converted} layers to NHWC; transposes {before} → {after} "
                f"({removed} inverse pairs cancelled)")
    return converted + removed


HEAVY = ("ConvolutionNHWC", "PoolingNHWC")


def _timed_regions(graph, config, logger, ctx):
    """(names of the layers to leave NCHW, {layer: {"nhwc": ms, "nchw": ms}}) from timing each region the
    conversion would make, or None when the runs that feed the timing fail (the device's preference then holds)."""
    import copy

    from backends.engine.builder.timed_choice import Probe, pick, replay_entry
    trial, renamed = copy.deepcopy(graph), {}
    converted = set(_convert(trial, set(), renamed))
    if not converted:
        return set(), {}
    _eliminate_pairs(trial, View(trial))
    eliminate_dead_layers(trial, config)
    regions = _regions(trial, converted)
    skip, chosen, kept, untimed = set(), {}, 0, []
    for names, edges in regions:
        recorded = [replay_entry(config.algorithm_selector, name) for name in names]
        if all(r is not None for r in recorded):
            choice = "nhwc" if all(str(r.get("kind", "")).endswith("NHWC") for r in recorded) else "nchw"
            logger.verbose(f"layout: region {sorted(names)}: {choice.upper()} from the replay file")
            skip |= names if choice == "nchw" else set()
            kept += choice == "nhwc"
        else:
            untimed.append((names, edges))
    if untimed:
        heavy = {name for names, _ in untimed for name in names}
        try:
            nhwc = Probe(trial, ctx)
            nhwc_ms = {n.name: _layer_ms(nhwc, n, config) for n in trial.nodes if n.name in heavy}
            edge_ms = {e.name: _layer_ms(nhwc, e, config) for _, edges in untimed for e in edges}
            env = _nchw_inputs(graph, heavy, nhwc, renamed)
            nchw = nhwc.derived(env) if env is not None else Probe(graph, ctx)
            nchw_ms = {n.name: _layer_ms(nchw, n, config) for n in graph.nodes if n.name in heavy}
            why = nchw.why
        except Exception as e:
            logger.warning(f"layout: the runs that feed layout timing failed ({str(e)[:300]}); convolution "
                           f"regions follow the device's preference instead")
            return None
    missing = (float("inf"), False)
    for names, edges in untimed:
        a = sum(nhwc_ms.get(k, missing)[0] for k in names) + sum(edge_ms[e.name][0] for e in edges)
        b = sum(nchw_ms.get(k, missing)[0] for k in names)
        host_a = any(nhwc_ms.get(k, missing)[1] for k in names) or any(edge_ms[e.name][1] for e in edges)
        choice = pick({"nhwc": (host_a, a), "nchw": (any(nchw_ms.get(k, missing)[1] for k in names), b)}) or "nhwc"
        logger.verbose(f"layout: region {sorted(names)}: NHWC {a:.3f} ms (with {len(edges)} transposes) vs NCHW "
                       f"{b:.3f} ms -> {choice.upper()}")
        for k in names:
            chosen[k] = {"nhwc": _ms(a), "nchw": _ms(b)}
        if choice == "nchw":
            skip |= names
        else:
            kept += 1
    if untimed:
        lost = sorted(k for names, _ in untimed for k in names if k not in nhwc_ms or nhwc_ms[k][0] == float("inf")
                      or k not in nchw_ms or nchw_ms[k][0] == float("inf"))
        if lost:
            logger.warning(f"layout: {len(lost)} layer(s) could not be timed in one of the layouts (first: "
                           f"'{lost[0]}': {nhwc.why or why or 'see -v'}); their regions take the other")
    logger.info(f"layout: {kept} of {len(regions)} convolution regions in NHWC "
                f"({len(untimed)} decided by timing, {len(regions) - len(untimed)} by the replay file)")
    return skip, chosen


def _nchw_inputs(graph, heavy, probe, renamed):
    """The inputs of the `heavy` layers as they are before conversion, from the NHWC run: tensors the conversion
    left alone as they are, the ones it made NHWC transposed back on the device; None when one cannot be found. (A
    second run of the network in NCHW is avoided: at the opt shapes its convolutions may run as host layers.)"""
    from backends.engine.runtime.executor import default_tactic, node_op
    back = Node(name="layout probe NHWC->NCHW", kind="Shuffle", inputs=["x"], outputs=["y"],
                params={"first_transpose": list(TO_NCHW), "reshape_dims": None, "second_transpose": None,
                        "zero_is_placeholder": True})
    tactic, op, env = default_tactic(back, probe.device), node_op(back), {}
    for n in graph.nodes:
        if n.name not in heavy:
            continue
        for a in n.inputs:
            if a is None or a in env:
                continue
            if a in probe.env:
                env[a] = probe.env[a]
            elif renamed.get(a) in probe.env:
                env[a] = probe.dev.run(tactic, op, [probe.env[renamed[a]]])[0]
            elif graph.constant_value(a) is not None:
                env[a] = graph.constant_value(a)
            else:
                return None
    return env


def _ms(v):
    return round(v, 4) if v != float("inf") else None    # None: no tactic ran it that way


def _regions(graph, converted):
    """[(names of the NHWC convolution / pooling layers of one region, [the transposes at its edges])]: layers the
    conversion made, connected through the tensors between them."""
    parent = {}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    prod = graph.producers()
    inside = [n for n in graph.nodes if n.name in converted]
    for n in inside:
        parent[n.name] = n.name
    for n in inside:
        for name in n.inputs:
            p = prod.get(name)
            if p is not None and p.name in parent:
                parent[find(p.name)] = find(n.name)
    edges = {}
    consumers = graph.consumers()
    for t in graph.nodes:
        if t.meta.get("layout") != "reformat":
            continue
        p = prod.get(t.inputs[0])
        near = p if p is not None and p.name in parent else \
            next((c for c in consumers.get(t.outputs[0], []) if c.name in parent), None)
        if near is not None:
            edges.setdefault(find(near.name), []).append(t)
    groups = {}
    for n in inside:
        if n.kind in HEAVY:
            groups.setdefault(find(n.name), set()).add(n.name)
    return [(names, edges.get(root, [])) for root, names in groups.items()]


def _layer_ms(probe, node, config):
    """(ms, host layer) of the node's best tactic in the precision the device's rule gives it (inf: cannot run)."""
    from backends.engine.builder.passes import precision as P
    from backends.engine.builder.timed_choice import variant
    dev = probe.dev
    p = node.meta.get("precision_constraint") or dev.choose_precision(
        node.kind, P._implemented(node, dev.name) - {"int8"}, P.enabled_precisions(config) - {"int8"})
    p = P.PRECISION_OF_DTYPE.get(p, p)
    want = P.STORAGE_OF.get(p, "float32")
    data = set(P.data_inputs(node, dev))
    inputs = [None if name is None else probe.value_as(probe.env.get(name), want) if i in data else
              probe.env.get(name) for i, name in enumerate(node.inputs)]
    m = probe.best(variant(node, precision=p), inputs)
    return (float("inf"), False) if m is None else (m.ms, m.host)


def _convert(graph, skip, renamed=None) -> list:
    """Step 1 over the graph: NHWC twins wrapped in transposes (layers named in `skip` stay NCHW); returns the
    names of the layers converted. `renamed` gets {NCHW output: the NHWC tensor now computed instead}."""
    view = View(graph)
    converted = []
    for n in list(graph.nodes):
        if n.precision == "int8" or n.name in skip:  # INT8 kernels take NCHW
            continue

        def from_nchw(name):
            return is_transpose(view.prod.get(name), TO_NCHW)
        operands = None
        conv = _conv_eligible(view, n)
        if conv is not None:
            k, b = conv
            m = k.shape[0]
            w = {"kernel_hwio": np.ascontiguousarray(k.transpose(2, 3, 1, 0).reshape(-1, m))}
            if b is not None:
                w["bias"] = np.asarray(b)
            for key, val in n.weights.items():
                if key.startswith("post_bias"):
                    w[key] = val
            post = [dict(s, axis=-1) if s["op"] == "bias" else s for s in (n.params.get("post_ops") or [])]
            extra = [s["input"] for s in post if s["op"] == "add"]
            inputs = [n.inputs[0], None, None] + [n.inputs[i] for i in extra]
            post = [dict(s, input=3 + extra.index(s["input"])) if s["op"] == "add" else s for s in post]
            n.kind, n.weights = "ConvolutionNHWC", w
            graph.set_inputs(n, inputs)
            n.params = dict(n.params, post_ops=post, kernel_spatial=[int(d) for d in k.shape[2:]],
                            num_output_maps=int(m))
            operands = [0] + list(range(3, len(inputs)))
        elif _pool_eligible(view, n):
            n.kind = "PoolingNHWC"
            operands = [0]
        else:
            operands = _agnostic_eligible(view, n, from_nchw)
            if operands is None:
                continue
            for i, name in enumerate(n.inputs):
                c = view.const(name) if name is not None else None
                if c is not None and c.ndim == 4 and c.size > 1:
                    graph.set_inputs(n, n.inputs[:i] + [view.new_constant(
                        f"{name}_nhwc", np.ascontiguousarray(c.transpose(TO_NHWC)), n)] + n.inputs[i + 1:])
        for i in operands:
            t = _transpose_node(view, f"{n.name}_transpose_input_{i}", n.inputs[i], TO_NHWC, f"{n.inputs[i]}_nhwc")
            view.insert_before(n, t)
            graph.set_inputs(n, n.inputs[:i] + [t.outputs[0]] + n.inputs[i + 1:])
        out = n.outputs[0]
        inner = view.unique(f"{out}_nhwc")
        graph.set_outputs(n, [inner] + n.outputs[1:])
        if renamed is not None:
            renamed[out] = inner
        back = _transpose_node(view, f"{n.name}_transpose_output_0", inner, TO_NCHW, f"{out}_nchw")
        back.outputs = [out]
        graph.insert_after(n, back)
        view.refresh()
        converted.append(n.name)
    return converted


def _eliminate_pairs(graph, view) -> int:
    removed, changed = 0, True
    while changed:
        changed = False
        for t2 in list(graph.nodes):
            if t2 not in graph.nodes or not is_transpose(t2):
                continue
            t1 = view.prod.get(t2.inputs[0])
            if not is_transpose(t1):
                continue
            p1, p2 = list(t1.params["first_transpose"]), list(t2.params["first_transpose"])
            if len(p1) == len(p2) and [p1[i] for i in p2] == list(range(len(p1))):
                if view.bypass(t2, t1.inputs[0], t2.outputs[0]):
                    removed += 1
                    changed = True
    return removed
