"""Layout by timing (passes/layout.py on a device that `chooses_by_timing`): which convolution regions the layout
pass converts to NHWC. The conversion is made on a copy of the graph; each region there (converted layers
connected through tensors, with the transposes left at its edges) costs its NHWC convolutions / poolings plus those
transposes, against the same layers in NCHW, each layer's best tactic timed in the precision the device's rule
would give it (builder/timed_choice.py: tactic selection's machinery and timing cache). The NCHW layers are timed
on the NHWC run's values transposed back on the device: no second run of the network, whose NCHW convolutions at
the opt shapes may only have host layers to run on. A replay file's recorded layer kinds decide where it has them.
"""
from __future__ import annotations

import copy

from backends.engine.builder.passes import nhwc as conversion, precision as P
from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.fusion_util import View
from backends.engine.builder.timed_choice import Probe, pick, replay_entry, variant
from backends.engine.engine_graph import Node
from backends.engine.runtime.executor import default_tactic, node_op
from native.precision import as_precision

HEAVY = ("ConvolutionNHWC", "PoolingNHWC")


def timed_regions(graph, config, logger, ctx):
    """(names of the layers to leave NCHW, {layer: {"nhwc": ms, "nchw": ms}}) from timing each region the
    conversion would make, or None when the runs that feed the timing fail (the device's preference then holds)."""
    trial, renamed = copy.deepcopy(graph), {}
    converted = set(conversion.convert(trial, set(), renamed))
    if not converted:
        return set(), {}
    conversion.eliminate_pairs(trial, View(trial))
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
    back = Node(name="layout probe NHWC->NCHW", kind="Shuffle", inputs=["x"], outputs=["y"],
                params={"first_transpose": list(conversion.TO_NCHW), "reshape_dims": None, "second_transpose": None,
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
    dev = probe.dev
    p = node.meta.get("precision_constraint") or dev.choose_precision(
        node.kind, P._implemented(node, dev.name) - {"int8"}, P.enabled_precisions(config) - {"int8"})
    p = as_precision(p)
    want = P.STORAGE_OF.get(p, "float32")
    data = set(P.data_inputs(node, dev))
    inputs = [None if name is None else probe.value_as(probe.env.get(name), want) if i in data else
              probe.env.get(name) for i, name in enumerate(node.inputs)]
    v = variant(node, precision=p)
    v.meta.pop("math", None)
    if P.tf32_math(node.kind, p, config.get_flag(P.BuilderFlag.TF32)):
        # a TF32 build times its convolutions in TF32, as they will run: strict FP32 favours NCHW kernels that
        # TF32 tensor cores then run slowly (ResNet-50 TF32 ran 8.5x FP16's time with the NCHW choice)
        v.meta["math"] = "tf32"
    m = probe.best(v, inputs)
    return (float("inf"), False) if m is None else (m.ms, m.host)
