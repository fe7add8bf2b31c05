"""INT8 I/O: int8 tensors between INT8 layers, on a device whose INT8 convolutions read and write int8 NHWC
(CUDA: cuDNN's INT8 graphs, native/cuda/tactics/cudnn_int8.py). Without it an INT8 layer reads and writes float32
arrays of dequantized values (four bytes an element where the int8 value needs one, and a quantize kernel at every
layer), which is why INT8 was no faster than FP16 on the GPU.

1. `mark` (the INT8 assignment pass, before the layout pass): an implicit INT8 convolution (calibrated or
   dynamic-range scales, no constraint) that such a tactic runs — 2-D, ungrouped, channel counts in multiples of 4,
   an epilogue of [residual add] [ReLU], cuDNN building its graph at the layer's shapes — gets
   meta["int8_io"] = True. The layout pass makes it NHWC; INT8 timing (passes/precision.py) leaves it INT8: its
   speed comes from the int8 tensors around it, which a one-layer timing against FP16 cannot see. Only timed builds
   (a device that `chooses_by_timing`, no tactic heuristic, layout pass on) mark: the untimed build keeps the NCHW
   INT8 tactics whose numerics equal the CPU's bit for bit; explicit Q/DQ layers keep them too (TensorRT's rule:
   they run as the model's Q/DQ say).
2. `apply` (after the precision pass): the output of a marked layer that has an output scale is stored int8
   (requantized in the layer's epilogue); a marked reader of it reads the int8 values directly when its input scale
   is that scale, or as its residual (the tactic rescales it by s_r / s_y); every other reader gets a Reformat
   int8 -> its storage type (q * scale). A marked layer whose input is not such an int8 tensor reads it through a
   Reformat to int8 (clamp(round(x / s_x)), the layer's rounding). params['int8']['io'] = {"input": "int8",
   "output": "int8" | "float32"} and ['residual_scales'] = {input index: scale} tell the tactic what it reads and
   writes. The inspector lists the Reformat layers, so the int8 chains' edges are visible.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.nhwc import TO_NHWC, is_transpose
from backends.engine.builder.passes.precision import enabled_precisions, int8_is_permission
from backends.engine.builder.timed_choice import TIE_MARGIN, Probe, chooses_by_timing, variant
from backends.engine.engine_graph import Node
from native.numerics import storage_numpy_dtype
from native.precision import LADDER, STORAGE, as_precision
from native.shared import int8_stem
from native.shared.int8_io import max_pool_refusal
from native.tactics import LayerContext, Op, tactics_for

ALIGN = 4        # channel counts the INT8 NHWC convolutions take (multiples of)


def io_tactics(device) -> list:
    """The device's tactics that run INT8 convolutions on int8 NHWC tensors (`int8_io = True`)."""
    return [t for t in tactics_for("ConvolutionNHWC", str(device)) if getattr(t, "int8_io", False)]


def enabled(config) -> bool:
    """Whether this build stores int8 tensors between INT8 layers (see the module docstring)."""
    if not chooses_by_timing(config) or config.uses_dla() or config.get_flag(BuilderFlag.DISABLE_LAYOUT) \
            or config.prefer_nhwc is False or "nhwc" not in config.device.formats:
        return False
    return bool(io_tactics(config.device))


def epilogue_ok(post_ops) -> bool:
    """[], [RELU], [add] or [add, RELU]: what the fused INT8 graph takes."""
    kinds = [s["op"] if s["op"] != "activation" else s.get("type") for s in post_ops or ()]
    return kinds in ([], ["RELU"], ["add"], ["add", "RELU"])


def why_not(node, graph) -> str | None:
    """Why the INT8 layer `node` cannot read and write int8 NHWC tensors (None: it can, cuDNN asked)."""
    if node.kind != "Convolution" or node.precision != "int8":
        return "not an INT8 convolution"
    if not int8_is_permission(node):
        return "explicit Q/DQ or INT8-constrained: kept on the INT8 kernels bit-equal to the CPU"
    p = node.params
    k = node.weights.get("kernel")
    if k is None or np.ndim(k) != 4 or np.asarray(k).dtype.kind != "f":
        return "kernel is not a constant 4-D float weight"
    if p.get("side") or p.get("integer") or (p.get("groups", 1) or 1) != 1 or \
            p.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", None):
        return "grouped, merged-shortcut or auto-padded convolution"
    m, c = int(k.shape[0]), int(k.shape[1])
    if m % ALIGN or (c % ALIGN and not int8_stem.packable(k.shape[2:], p.get("strides"), p.get("pre_padding"),
                                                         p.get("dilations"), p.get("groups"), c)):
        return f"channels {c} -> {m} are not multiples of {ALIGN}"
    if not epilogue_ok(p.get("post_ops")) or any(key.startswith("post_bias") for key in node.weights):
        return "its fused epilogue is not [residual add] [ReLU]"
    return None


def _nhwc_op(node) -> Op:
    """The layer as the layout pass will make it (ConvolutionNHWC) with INT8 I/O, to ask the tactics about."""
    k = np.asarray(node.weights["kernel"])
    m = int(k.shape[0])
    post = [dict(s) for s in node.params.get("post_ops") or ()]
    extra = [s["input"] for s in post if s["op"] == "add"]
    post = [dict(s, input=3 + extra.index(s["input"])) if s["op"] == "add" else s for s in post]
    p8 = dict(node.params["int8"])
    p8["io"] = {"input": "int8", "output": "int8" if p8.get("output_scale") is not None else "float32"}
    params = dict(node.params, post_ops=post, kernel_spatial=[int(d) for d in k.shape[2:]], num_output_maps=m,
                  int8=p8)
    weights = {"kernel_hwio": np.ascontiguousarray(k.transpose(2, 3, 1, 0).reshape(-1, m))}
    if "bias" in node.weights:
        weights["bias"] = node.weights["bias"]
    return Op(kind="ConvolutionNHWC", name=node.name, params=params, weights=weights, precision="int8",
              format="nhwc")


def _stem_op(op, node, stem) -> Op:
    """The layer as it runs on the INT8 stem's packed tensor (native/shared/int8_stem.py)."""
    w = dict(op.weights, kernel_hwio=int8_stem.packed_kernel(op.weights["kernel_hwio"], op.params["kernel_spatial"],
                                                             node.params.get("pre_padding"), stem))
    return Op(kind=op.kind, name=op.name, params=int8_stem.packed_conv_params(op.params, stem), weights=w,
              precision=op.precision, format=op.format)


def _stem_plan(node, shape):
    """The INT8 stem packing of `node` at input shape [N, C, H, W], None when it needs none (its channels are
    aligned) or it does not pack."""
    p = node.params
    c = int(shape[1])
    if c % ALIGN == 0:
        return None
    return int8_stem.plan(p["kernel_spatial"] if "kernel_spatial" in p else np.shape(node.weights["kernel"])[2:],
                          p.get("strides"), p.get("pre_padding"), p.get("post_padding"), p.get("dilations"),
                          p.get("groups"), c, int(shape[2]), int(shape[3]))


def _pack_ms(probe, shape, stem):
    """The device's time to quantize and pack a float32 NCHW input of `shape` for the INT8 stem."""
    x = probe.random(tuple(shape), np.float32)
    node = Node(name="Reformat float32->int8 (stem pack)", kind="Reformat", inputs=["x"], outputs=["y"],
                params={"from": "float32", "to": "int8", "scale": 1.0, "pack": dict(stem, layout="nchw")},
                precision="int8", meta={"output_types": ["int8"]})
    m = probe.best(node, [x])
    return None if m is None else m.ms


def _static_shape(graph, name):
    info = graph.tensor_info.get(name)
    shape = getattr(info, "shape", None)
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    return list(shape)


def _float_storage(config):
    """The float precision the layers around an INT8 chain would otherwise run in (the lowest enabled)."""
    enabled = enabled_precisions(config) & config.device.precisions
    return next((p for p in LADDER if p in enabled and p not in ("int8", "fp8")), "float32")


def time_against_float(probe, node, op, shape, config):
    """(int8 ms, float ms, float precision) of the layer at its opt shape: its INT8 NHWC tactics on int8 tensors
    against its float NHWC tactics in the lowest enabled float precision on tensors of that storage (the chain
    assumption: its neighbours are the same kind as it; the Reformat layers at a chain's edges are not counted)."""
    fp = _float_storage(config)
    n, c, h, w = shape
    kh, kw = op.params["kernel_spatial"]
    m = op.params["num_output_maps"]
    st, pre, post = op.params.get("strides") or [1, 1], op.params.get("pre_padding") or [0, 0], \
        op.params.get("post_padding") or [0, 0]
    dil = op.params.get("dilations") or [1, 1]
    oh = (h + pre[0] + post[0] - (kh - 1) * dil[0] - 1) // st[0] + 1
    ow = (w + pre[1] + post[1] - (kw - 1) * dil[1] - 1) // st[1] + 1
    has_res = any(s["op"] == "add" for s in op.params["post_ops"])
    v8 = variant(node, kind="ConvolutionNHWC", params=op.params, weights=op.weights, precision="int8",
                 inputs=[node.inputs[0], None, None] + ([node.inputs[0]] if has_res else []))
    x8 = probe.random((n, h, w, c), np.int8)
    i8 = [x8, None, None] + ([probe.random((n, oh, ow, m), np.int8)] if has_res else [])
    # unit scales: the time does not depend on them, and layers of one shape then share one timing-cache entry
    p8 = dict(op.params["int8"], input_scale=1.0, output_scale=1.0 if op.params["int8"].get("output_scale") else None)
    if has_res:
        p8["residual_scales"] = {"3": 1.0}
    v8.params = dict(op.params, int8=p8)
    # every INT8 plan, each on its own: cuDNN's first-ranked INT8 plan is often not its fastest (ResNet-50's 3x3
    # convolutions at 56x56 on an H200: plan 0 0.31 ms, plan 2 0.086 ms), and a family's first plan is all a
    # probe times otherwise (timed_choice.FIRST_OF_FAMILY)
    m8 = None
    for t in io_tactics(config.device):
        v8.meta["tactics_allowed"] = [t.name]
        timed = probe.best(v8, i8)
        if timed is not None and (m8 is None or timed.ms < m8.ms):
            m8 = timed
    dt = storage_numpy_dtype(fp)
    vf = variant(v8, precision=fp, params={k: v for k, v in op.params.items() if k != "int8"})
    xf = probe.random((n, h, w, c), dt)
    mf = probe.best(vf, [xf, None, None] + ([probe.random((n, oh, ow, m), dt)] if has_res else []))
    return (None if m8 is None else m8.ms), (None if mf is None else mf.ms), fp


def _leave_int8(n, ms8, msf, fp):
    """The layer runs in a float precision after all: INT8 on int8 tensors, its fastest INT8 form, was slower (the
    NCHW INT8 kernels on float tensors would be slower still, so they are not timed); the precision pass times
    its float precisions like any float layer's."""
    n.precision = "float32"
    n.params = {k: v for k, v in n.params.items() if k != "int8"}
    n.meta.pop("int8_stem", None)
    n.meta["int8_note"] = f"not INT8: {fp} is faster ({msf:.3f} ms vs INT8 {ms8:.3f} ms on int8 NHWC tensors)"
    n.meta["int8_precision_ms"] = {"int8": round(ms8, 4), fp: round(msf, 4)}
    n.meta.pop("precision_ms", None)


def chains(graph) -> list:
    """The marked layers (meta["int8_io"]) grouped into chains: layers joined by a tensor one of them writes and
    another reads (as its data input or its residual) share a chain. In graph order."""
    marked = [n for n in graph.nodes if n.meta.get("int8_io")]
    parent = {id(n): id(n) for n in marked}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    consumers = None
    pools = []
    for n in marked:
        for x in [n.inputs[0]] + [n.inputs[i] for i in [_residual_index(n)] if i is not None and i < len(n.inputs)]:
            p = graph.producer(x)
            if p is not None and id(p) in parent:
                parent[root(id(p))] = root(id(n))
            elif p is not None and p.kind in ("Pooling", "PoolingNHWC") and x == n.inputs[0]:
                consumers = consumers or graph.consumers()
                q = graph.producer(p.inputs[0])
                if q is not None and id(q) in parent and _joins_int8(p, consumers) and id(p) not in parent:
                    parent[id(p)] = id(p)
                    pools.append(p)
                    parent[root(id(q))] = root(id(p))
                if id(p) in parent:
                    parent[root(id(p))] = root(id(n))
    groups = {}
    for n in graph.nodes:
        if id(n) in parent:
            groups.setdefault(root(id(n)), []).append(n)
    return list(groups.values())


def _joins_int8(pool, consumers) -> bool:
    """Whether a pool between INT8 I/O layers will run INT8 between them (`apply`'s int8_pools: a 2-D max pool
    [+ ReLU] that only marked layers read, as their data input)."""
    if max_pool_refusal(pool, None) is not None:
        return False
    y = pool.outputs[0]
    readers = consumers.get(y, [])
    return bool(readers) and all(r.meta.get("int8_io") and r.inputs[0] == y and y not in r.inputs[1:]
                                 for r in readers)


def chain_edges(graph, chain, consumers) -> tuple:
    """(tensors the chain reads from outside it through a quantizing Reformat, tensors it writes that something
    outside it reads: a dequantizing Reformat each): the Reformat layers `apply` will put at the chain's edges.
    `consumers`: graph.consumers(), made once for every chain."""
    ids = {id(n) for n in chain}
    outs = set(graph.output_names)
    into = list(dict.fromkeys(n.inputs[0] for n in chain if id(graph.producer(n.inputs[0])) not in ids
                              and not n.meta.get("int8_stem")))     # (the stem's pack is in its INT8 time)
    out_of = [n.outputs[0] for n in chain if n.outputs[0] in outs or
              any(id(r) not in ids for r in consumers.get(n.outputs[0], []))]
    return into, out_of


def _reformat_ms(probe, shape, from_type, to_type):
    """The device's time to quantize (float -> int8) or dequantize (int8 -> float) a tensor of `shape` (unit scale:
    the time does not depend on it, and one timing-cache entry serves every tensor of the shape)."""
    x = probe.random(shape, np.int8 if from_type == "int8" else storage_numpy_dtype(from_type))
    node = Node(name=f"Reformat {from_type}->{to_type}", kind="Reformat", inputs=["x"], outputs=["y"],
                params={"from": from_type, "to": to_type, "scale": 1.0}, precision=as_precision(to_type),
                meta={"output_types": [to_type]})
    m = probe.best(node, [x])
    return None if m is None else m.ms


def _chain_reformats_ms(graph, probe, chain, consumers, fp, memo) -> tuple:
    """(ms of the Reformat layers at `chain`'s edges, whether one could not be timed, its (into, out_of) edges);
    `memo` keeps each (size, from, to) timing."""
    into, out_of = chain_edges(graph, chain, consumers)
    total, unknown = 0.0, False
    for names, pair in ((into, (fp, "int8")), (out_of, ("int8", fp))):
        for name in names:
            value = probe.env.get(name)
            shape = tuple(int(d) for d in value.shape) if hasattr(value, "shape") else _static_shape(graph, name)
            if shape is None:
                unknown = True
                continue
            key = (int(np.prod(shape)),) + pair
            if key not in memo:
                memo[key] = _reformat_ms(probe, shape, *pair)
            if memo[key] is None:
                unknown = True
            else:
                total += memo[key]
    return total, unknown, (into, out_of)


def _edge_reformats_ms(graph, probe, consumers, fp, memo) -> tuple:
    """(ms of the Reformat layers at the edges of every chain the marked layers make now, whether one could not be
    timed)."""
    total, unknown = 0.0, False
    for chain in chains(graph):
        ms, unk, _ = _chain_reformats_ms(graph, probe, chain, consumers, fp, memo)
        total, unknown = total + ms, unknown or unk
    return total, unknown


def rejoin_edge_layers(graph, probe, slow, logger) -> set:
    """Of the layers INT8 lost to float on their own (`slow`: (node, INT8 ms, float ms, float precision)), the ids
    of those marked after all because in float they cost more in Reformat layers than INT8 costs them: a float
    layer whose input and output tensors INT8 layers read is a quantizing and a dequantizing pass over them
    (ResNet-50 b128 on an H200: layer1.0.conv1 0.010 ms slower in INT8, its float output's quantizing Reformat
    0.076 ms). Every chain's edge Reformats are timed with and without, first for each run of such layers that
    read one another's outputs (two float layers in a row pay for each other's Reformats: neither joins alone),
    then for each layer of a run that did not join whole, in graph order."""
    joined, memo = set(), {}
    consumers = graph.consumers()
    now = {}   # float precision -> the edge Reformats' (ms, unknown) at the present marking (a failed try keeps it)

    def try_join(group):
        fp = group[0][3]
        if fp not in now:
            now[fp] = _edge_reformats_ms(graph, probe, consumers, fp, memo)
        before, unknown = now[fp]
        for n, *_ in group:
            n.meta["int8_io"] = True
        after, unknown_after = _edge_reformats_ms(graph, probe, consumers, fp, memo)
        slower_ms = sum(ms8 - msf for _, ms8, msf, _ in group)
        if unknown or unknown_after or after + slower_ms >= before:
            for n, *_ in group:
                n.meta.pop("int8_io")
            return False
        now[fp] = (after, unknown_after)
        names = ", ".join(f"'{n.name}'" for n, *_ in group)
        for n, ms8, msf, _ in group:
            joined.add(id(n))
            n.meta["int8_joined"] = (f"INT8 though {fp} is faster alone ({msf:.3f} ms vs INT8 {ms8:.3f} ms): in {fp} "
                                     f"the Reformat layers around {'it' if len(group) == 1 else names} cost "
                                     f"{before - after:.3f} ms more")
        logger.verbose(f"INT8 I/O: {names} join{'s' if len(group) == 1 else ''} the INT8 chain around "
                       f"{'it' if len(group) == 1 else 'them'}: {slower_ms:.3f} ms slower alone, "
                       f"{before - after:.3f} ms less of Reformat layers")
        return True

    for run in _runs(graph, slow):
        if len(run) > 1 and try_join(run):
            continue
        for one in run:
            if id(one[0]) not in joined:
                try_join([one])
    return joined


def _runs(graph, slow) -> list:
    """`slow`'s entries grouped into runs: layers joined by a tensor one writes and another reads (as data or as
    its residual). In graph order."""
    index = {id(n): i for i, (n, *_) in enumerate(slow)}
    parent = list(range(len(slow)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i, (n, *_) in enumerate(slow):
        for x in [n.inputs[0]] + [n.inputs[r] for r in [_residual_index(n)] if r is not None and r < len(n.inputs)]:
            p = graph.producer(x)
            if p is not None and id(p) in index:
                parent[root(index[id(p)])] = root(i)
    runs = {}
    for i, entry in enumerate(slow):
        runs.setdefault(root(i), []).append(entry)
    return list(runs.values())


def drop_unprofitable_chains(graph, probe, config, logger) -> int:
    """Unmark the chains whose INT8 layers save less time than the Reformat layers at their edges cost; returns how
    many layers left INT8. Each layer was timed alone on the chain assumption (time_against_float: its neighbours
    INT8 too); a chain of one or two INT8 layers between float ones pays a quantizing and a dequantizing pass over
    its tensors, which on ResNet-50 at batch 128 cost more than the layers' INT8 kernels saved."""
    fp = _float_storage(config)
    memo, dropped = {}, 0
    consumers = graph.consumers()   # (leaving INT8 changes layers' precisions, not the graph's edges)
    for chain in chains(graph):
        layers = [n for n in chain if n.meta.get("int8_io")]      # (a chain's max pools are not timed)
        timed = [n.meta.get("precision_ms") or {} for n in layers]
        if not all("int8" in t and fp in t for t in timed):
            continue      # a layer marked without timing (by the rule): the chain stays as the rule says
        saved = sum(t[fp] - t["int8"] for t in timed)
        cost, unknown, (into, out_of) = _chain_reformats_ms(graph, probe, chain, consumers, fp, memo)
        float_ms = sum(t[fp] for t in timed)
        if unknown or float_ms - saved + cost <= float_ms * (1 + TIE_MARGIN):   # (the per-layer rule's tie margin)
            logger.verbose(f"INT8 I/O: chain of {len(layers)} from '{layers[0].name}': INT8 saves {saved:.3f} ms, its "
                           f"{len(into)} + {len(out_of)} Reformat layers cost {cost:.3f} ms -> INT8"
                           + (" (a Reformat could not be timed)" if unknown else ""))
            continue
        for n, t in zip(layers, timed):
            n.meta.pop("int8_io")
            _leave_int8(n, t["int8"], t[fp], fp)
            n.meta["int8_note"] = (f"not INT8: its chain of {len(layers)} INT8 layer(s) saves {saved:.3f} ms and the "
                                   f"Reformat layers at its edges cost {cost:.3f} ms")
        dropped += len(layers)
        logger.verbose(f"INT8 I/O: chain of {len(layers)} from '{layers[0].name}' runs {fp}: INT8 saves {saved:.3f} "
                       f"ms, its {len(into)} + {len(out_of)} Reformat layers would cost {cost:.3f} ms")
    return dropped


def mark(graph, config, logger, ctx=None) -> tuple:
    """Step 1: mark the INT8 convolutions that will read and write int8 NHWC tensors; returns (how many, how many
    left INT8). With the pass context `ctx` (precision by timing on), a layer is marked only where its INT8 NHWC
    tactic times no slower than its float NHWC one (time_against_float); where it is slower the layer leaves INT8
    (a float layer from then on); layers the INT8 NHWC tactic cannot run are timed as before (time_int8_layers)."""
    if not enabled(config):
        return 0, 0
    tactics = io_tactics(config.device)
    probe = None
    if ctx is not None and config.precision_by_timing:
        try:      # one run at the opt shapes: the layers' shapes (and time_int8_layers times on it next)
            probe = ctx.state["int8_probe"] = Probe(graph, ctx)
        except Exception as e:
            logger.warning(f"INT8 I/O: the run that feeds its timing failed ({str(e)[:300]}); layers the INT8 "
                           f"NHWC tactics run are marked without timing")
    marked, refused, slower, slow = 0, [], 0, []
    for n in graph.nodes:
        if n.kind != "Convolution" or n.precision != "int8":
            continue
        why = why_not(n, graph)
        if why is None:
            value = probe.env.get(n.inputs[0]) if probe is not None else None
            shape = [int(d) for d in value.shape] if getattr(value, "ndim", 0) == 4 else \
                _static_shape(graph, n.inputs[0])
            stem = _stem_plan(n, shape) if shape is not None else None
            if shape is not None and int(shape[1]) % ALIGN and stem is None:
                why = f"channels {shape[1]} are not a multiple of {ALIGN} and do not pack as an INT8 stem at this size"
            elif shape is None and np.shape(n.weights["kernel"])[1] % ALIGN:
                why = "an INT8 stem packs at a known input size"
            elif shape is not None:
                op = _nhwc_op(n)
                run_op, run_shape = (op, shape) if stem is None else \
                    (_stem_op(op, n, stem), [shape[0], stem["cp"], stem["rows"], stem["ow"]])
                width = 3 + sum(s["op"] == "add" for s in op.params["post_ops"])
                ctx = LayerContext([[run_shape[0], run_shape[2], run_shape[3], run_shape[1]]] + [None] * (width - 1),
                                   ["int8"] + [None] * (width - 1))
                reasons = [t.supports(run_op, ctx) for t in tactics]
                if None not in reasons:
                    why = f"cuDNN: {reasons[0]}"
                elif probe is not None:
                    try:
                        ms8, msf, fp = time_against_float(probe, n, run_op, run_shape, config)
                        if stem is not None:    # the packed INT8 layer + its pack against the float layer itself
                            msf = time_against_float(probe, n, op, shape, config)[1]
                            pack = _pack_ms(probe, shape, stem)
                            ms8 = None if ms8 is None or pack is None else ms8 + pack
                    except Exception as e:    # timing broke: the rule (mark) holds, the log says why
                        logger.warning(f"INT8 I/O: timing '{n.name}' failed ({type(e).__name__}: {str(e)[:200]})")
                        ms8 = msf = fp = None
                    if ms8 is not None and msf is not None:
                        n.meta["precision_ms"] = {"int8": round(ms8, 4), fp: round(msf, 4)}
                        logger.verbose(f"INT8 I/O: '{n.name}': INT8 NHWC on int8 tensors {ms8:.3f} ms vs {fp} NHWC "
                                       f"{msf:.3f} ms -> {'INT8' if ms8 <= msf * (1 + TIE_MARGIN) else fp}")
                        if ms8 > msf * (1 + TIE_MARGIN):
                            slow.append((n, ms8, msf, fp))    # leaves INT8 unless its Reformats say otherwise
                            continue
                    elif ms8 is None:
                        why = f"its INT8 NHWC tactics did not run at the opt shapes ({probe.why or 'see -v'})"
        if why is not None:
            n.meta.pop("precision_ms", None)
            refused.append((n.name, why))
            logger.verbose(f"INT8 I/O: '{n.name}' keeps float tensors around it ({why})")
            continue
        n.meta["int8_io"] = True
        if stem is not None:
            n.meta["int8_stem"] = stem
            logger.verbose(f"INT8 I/O: '{n.name}' runs as an INT8 stem: {shape[1]} input channels packed "
                           f"space-to-depth into {stem['cp']}, a {stem['k2'][0]}x1 convolution")
        marked += 1
    if slow:
        joined = rejoin_edge_layers(graph, probe, slow, logger)
        for n, ms8, msf, fp in slow:
            if id(n) not in joined:
                _leave_int8(n, ms8, msf, fp)
        marked, slower = marked + len(joined), slower + len(slow) - len(joined)
    if probe is not None and marked:
        dropped = drop_unprofitable_chains(graph, probe, config, logger)
        marked, slower = marked - dropped, slower + dropped
    if marked or refused or slower:
        logger.info(f"INT8 I/O: {marked} INT8 convolutions read and write int8 NHWC tensors"
                    + (f"; {slower} leave INT8 (a float precision is faster; -v: each one's timings)" if slower else "")
                    + (f"; {len(refused)} cannot (first: '{refused[0][0]}': {refused[0][1]})" if refused else ""))
    return marked, slower


def _stored_as(graph, name) -> str:
    """What tensor `name` is stored as after the precision pass (its producer's output type)."""
    p = graph.producer(name)
    if p is None:
        return next((t.dtype or "float32" for t in graph.inputs if t.name == name), "float32")
    if p.kind == "Reformat":
        return p.params["to"]
    types = p.meta.get("output_types")
    if isinstance(types, list):
        i = p.outputs.index(name)
        if i < len(types) and types[i]:
            return types[i]
    return STORAGE.get(p.precision, "float32")


def _residual_index(node):
    return next((s["input"] for s in node.params.get("post_ops") or () if s["op"] == "add"), None)


def _reformat(src, dst, from_type, to_type, scale, rounding=None) -> Node:
    params = {"from": from_type, "to": to_type, "scale": float(scale)}
    if rounding is not None:
        params["rounding"] = rounding
    return Node(name=f"Reformat {src} {from_type}->{to_type}", kind="Reformat", inputs=[src], outputs=[dst],
                params=params, precision=as_precision(to_type), meta={"output_types": [to_type]})


def apply(graph, config, logger) -> int:
    """Step 2 (after the precision pass): int8 storage and the Reformat layers at the int8 chains' edges; returns
    how many tensors are stored int8."""
    for n in graph.nodes:       # marked layers the layout pass left NCHW: INT8 on float tensors after all
        if n.meta.get("int8_io") and (n.kind != "ConvolutionNHWC" or n.precision != "int8"):
            n.meta.pop("int8_io")
            n.meta.pop("int8_stem", None)
    io = [n for n in graph.nodes if n.meta.get("int8_io")]
    if not io:
        return 0
    io_ids = {id(n) for n in io}
    outs = set(graph.output_names)
    body_reads = set()
    for n in graph.nodes:
        for sub in n.subgraphs.values():
            body_reads |= sub.outer_references()
    scale_of = {}
    for n in io:
        s_y = n.params["int8"].get("output_scale")
        if s_y is not None and n.outputs[0] not in outs and n.outputs[0] not in body_reads:
            scale_of[n.outputs[0]] = float(s_y)
    residual_scales = {id(n): {} for n in io}
    dequantized = quantized = 0
    pools = int8_pools(graph, config, io_ids, scale_of, outs | body_reads)
    pool_ids = {id(p) for p in pools}
    consumers = graph.consumers()
    for t, s in scale_of.items():
        prod = graph.producer(t)
        prod.meta["output_types"] = ["int8"]
        made = None
        for r in list(dict.fromkeys(consumers.get(t, []))):
            if id(r) in pool_ids:       # an INT8 max pool reads it at its scale
                continue
            if r.kind == "Reformat" and r.params.get("from") == "float32" and r.params.get("to") in ("float16",
                                                                                                   "float32",
                                                                                                   "bfloat16"):
                r.params = {"from": "int8", "to": r.params["to"], "scale": s}
                r.name = f"Reformat {t} int8->{r.params['to']}"
                dequantized += 1
                continue
            inputs = list(r.inputs)
            for i, name in enumerate(inputs):
                if name != t:
                    continue
                if id(r) in io_ids and i == 0 and float(r.params["int8"]["input_scale"]) == s:
                    continue
                if id(r) in io_ids and i == _residual_index(r):
                    residual_scales[id(r)][str(i)] = s
                    continue
                if made is None:
                    made = _reformat(t, f"{t} (dequantized)", "int8", "float32", s)
                    graph.insert_after(prod, made)
                    dequantized += 1
                inputs[i] = made.outputs[0]
            if inputs != r.inputs:
                graph.set_inputs(r, inputs)
    consumers = graph.consumers()
    memo = {}
    readers_of_int8 = io_ids | pool_ids
    for n in pools:
        quantized += _quantize_input(graph, n, n.params["int8"]["scale"], n.params["int8"]["rounding"], scale_of,
                                     consumers, readers_of_int8, memo)
    for n in io:
        p8 = dict(n.params["int8"])
        s_x = float(p8["input_scale"])
        if n.meta.get("int8_stem"):
            quantized += _stem_input(graph, n, s_x, p8.get("rounding", "half_even"), consumers)
        else:
            quantized += _quantize_input(graph, n, s_x, p8.get("rounding", "half_even"), scale_of, consumers,
                                         readers_of_int8, memo)
        p8["io"] = {"input": "int8", "output": "int8" if n.outputs[0] in scale_of else "float32"}
        if residual_scales[id(n)]:
            p8["residual_scales"] = residual_scales[id(n)]
        else:
            p8.pop("residual_scales", None)
        n.params = dict(n.params, int8=p8)
        n.meta["int8_note"] = f"INT8 in, {'INT8' if p8['io']['output'] == 'int8' else 'FP32'} out (int8 NHWC tensors)" \
            + (f"; {n.meta.pop('int8_joined')}" if n.meta.get("int8_joined") else "")
    eliminate_dead_layers(graph, config)
    # counted once the dead ones are gone (a float copy the chain no longer reads became a Reformat, then died)
    quantized = sum(n.kind == "Reformat" and n.params.get("to") == "int8" for n in graph.nodes)
    dequantized = sum(n.kind == "Reformat" and n.params.get("from") == "int8" for n in graph.nodes)
    logger.info(f"INT8 I/O: {len(io)} layers on int8 NHWC tensors"
                + (f" and {len(pools)} max pool{'s' if len(pools) > 1 else ''}" if pools else "")
                + f", {len(scale_of)} tensors stored int8; "
                f"{quantized} quantizing and {dequantized} dequantizing Reformat layers at the chains' edges")
    return len(scale_of)


def _stem_input(graph, n, s_x, rounding, consumers) -> int:
    """The INT8 stem (native/shared/int8_stem.py): one Reformat quantizes and packs the layer's float input (read
    as NCHW from before the layout pass's transpose, and past the precision pass's float copies, where only the
    stem reads them), and the layer becomes the packed convolution (its kernel packed; the int32 accumulators are the original's). Returns 1 (the Reformat)."""
    stem = dict(n.meta.pop("int8_stem"))
    src, layout = n.inputs[0], "nhwc"
    while len(consumers.get(src, [])) == 1:     # back through float copies and the layout pass's transpose
        pr = graph.producer(src)
        if pr is not None and pr.kind == "Reformat" and pr.params.get("scale") is None and \
                {pr.params.get("from"), pr.params.get("to")} <= {"float32", "float16", "bfloat16"}:
            src = pr.inputs[0]
        elif layout == "nhwc" and is_transpose(pr, TO_NHWC):
            src, layout = pr.inputs[0], "nchw"
        else:
            break
    pack = _reformat(src, f"{src} (int8 stem {stem['c']}->{stem['cp']} channels)", _stored_as(graph, src), "int8",
                     s_x, rounding)
    pack.params["pack"] = dict(stem, layout=layout)
    graph.insert_before(n, pack)
    n.weights = dict(n.weights, kernel_hwio=int8_stem.packed_kernel(n.weights["kernel_hwio"],
                                                                    n.params["kernel_spatial"],
                                                                    n.params.get("pre_padding"), stem))
    kh, kw = n.params["kernel_spatial"]
    n.params = int8_stem.packed_conv_params(n.params, stem)
    n.meta["int8_joined"] = "; ".join(filter(None, [n.meta.get("int8_joined"), (
        f"INT8 stem: its {kh}x{kw}/2 convolution over {stem['c']} channels runs as a {stem['k2'][0]}x1 one over "
        f"{stem['cp']} space-to-depth packed channels")]))
    graph.set_inputs(n, [pack.outputs[0]] + n.inputs[1:])
    return 1


def _quantize_input(graph, n, s_x, rounding, scale_of, consumers, readers_of_int8, memo) -> int:
    """Make `n` read its data input as int8 at scale s_x: directly where that tensor is stored so, else through a
    quantizing Reformat (one per source and scale, shared by its readers). A float32 copy of a float16 / bfloat16
    tensor that only int8 readers read is skipped: the Reformat quantizes the narrow tensor itself (the same
    values) and the copy is left dead. Returns how many Reformat layers it added."""
    x = n.inputs[0]
    if scale_of.get(x) == s_x:
        return 0
    src, have = x, _stored_as(graph, x)
    pr = graph.producer(x)
    if pr is not None and pr.kind == "Reformat" and pr.params.get("to") == "float32" and \
            pr.params.get("from") in ("float16", "bfloat16") and \
            all(id(r) in readers_of_int8 for r in consumers.get(x, [])):
        src, have = pr.inputs[0], pr.params["from"]
    q = memo.get((src, s_x))
    added = 0
    if q is None:
        q = memo[(src, s_x)] = _reformat(src, f"{src} (int8 {s_x:.6g})", have, "int8", s_x, rounding)
        graph.insert_before(n, q)
        added = 1
    graph.set_inputs(n, [q.outputs[0]] + n.inputs[1:])
    return added


def int8_pools(graph, config, io_ids, scale_of, kept_float) -> list:
    """Max pools that run on int8 tensors, as TensorRT runs them between INT8 layers (called by `apply` before it
    places the Reformat layers). A 2-D NHWC max pool [+ ReLU] whose every reader is an INT8 I/O layer reading it as
    its data input (directly, or through the precision pass's float32 copy of a float16 / bfloat16 tensor), on a
    device with an INT8 max pool:
    - whose input an INT8 I/O layer writes as int8 at scale s_p: the pool reads and writes int8 at s_p and its
      readers' input scale becomes s_p (the max of values on s_p's grid is on it, so nothing is rounded): the
      chain skips a dequantizing and a quantizing Reformat (VGG-style conv -> pool -> conv);
    - whose input is float, when the int8 copy of its input is smaller than its float output (a stride-1 pool):
      the quantizing Reformat, at the readers' one scale, moves in front of it. Quantize-then-max equals
      max-then-quantize (rounding is monotone; q(0) = 0 for the ReLU). A pool that shrinks its input stays float
      (ResNet's 3x3/2 stem pool: quantizing its input would move more bytes than it saves).
    Each pool's output joins `scale_of`; returns the pools."""
    tactics8 = [t for t in tactics_for("PoolingNHWC", str(config.device)) if "int8" in t.precisions]
    if not tactics8:
        return []
    consumers = graph.consumers()
    pools = []
    for n in list(graph.nodes):
        if n.kind != "PoolingNHWC" or n.precision == "int8" or len(n.outputs) != 1 or n.outputs[0] in kept_float:
            continue
        y = n.outputs[0]
        readers, copies = _int8_readers(y, consumers, io_ids, kept_float)
        if not readers:
            continue
        x = src = n.inputs[0]
        pr = graph.producer(x)
        if x not in scale_of and pr is not None and pr.kind == "Reformat" and pr.params.get("from") == "float32" \
                and pr.inputs[0] in scale_of and all(c is n for c in consumers.get(x, [])):
            src = pr.inputs[0]          # the precision pass's float copy of an INT8 layer's output
        s = scale_of.get(src)
        if s is None:
            scales = {float(r.params["int8"]["input_scale"]) for r in readers}
            # int8 input bytes against float output bytes: the output has ~1 / (sh * sw) of the input's elements
            shrink = int(np.prod(n.params.get("strides") or [1, 1]))
            if len(scales) != 1 or shrink >= np.dtype(storage_numpy_dtype(_stored_as(graph, y))).itemsize:
                continue
            s = scales.pop()
        shape = _static_shape(graph, x)
        if all(t.supports(n, LayerContext([shape], ["int8"])) for t in tactics8):   # each says why it cannot
            continue
        n.precision = "int8"
        n.params = dict(n.params, int8={"scale": s, "rounding": readers[0].params["int8"].get("rounding",
                                                                                             "half_even")})
        n.meta["output_types"] = ["int8"]
        n.meta["int8_note"] = "INT8 max pool between int8 tensors" + \
            (" (the quantizing Reformat moved in front of it)" if src not in scale_of else "")
        n.tactic_name = None
        if src != x:
            graph.set_inputs(n, [src] + n.inputs[1:])
        for c in copies:
            for r in list(dict.fromkeys(consumers.get(c.outputs[0], []))):
                graph.set_inputs(r, [y if t == c.outputs[0] else t for t in r.inputs])
        for r in readers:
            r.params = dict(r.params, int8=dict(r.params["int8"], input_scale=s))
        scale_of[y] = s
        pools.append(n)
    return pools


def _int8_readers(y, consumers, io_ids, kept_float):
    """(the INT8 I/O layers that read tensor y as their data input, the float32 copies of y they read it through);
    (None, None) when anything else reads y."""
    def data_reader(r, t):
        return id(r) in io_ids and r.inputs[0] == t and t not in r.inputs[1:]
    readers, copies = [], []
    for r in dict.fromkeys(consumers.get(y, [])):
        if r.kind == "Reformat" and r.params.get("to") == "float32" and \
                r.params.get("from") in ("float16", "bfloat16") and r.outputs[0] not in kept_float:
            sub = list(dict.fromkeys(consumers.get(r.outputs[0], [])))
            if not sub or not all(data_reader(c, r.outputs[0]) for c in sub):
                return None, None
            readers += sub
            copies.append(r)
        elif data_reader(r, y):
            readers.append(r)
        else:
            return None, None
    return readers, copies
