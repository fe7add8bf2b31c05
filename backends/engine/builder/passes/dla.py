"""DLA placement and partitioning (seed 000 L139–164, L389–499): which engine layers the DLA runs, how they group
into loadables, their memory pools, and the reformat layers at the boundaries.

Runs after fusion (the rules apply to the layers the build makes) and after the timing run (which gives every
tensor's shape). `plan_dla` decides without touching the graph (`inspect capability` uses it); `apply_dla` also
rewrites the graph: each loadable becomes one `DlaLoadable` layer (TensorRT's `{ForeignNode[...]}`) whose body runs on
the DLA device, with `DlaReformat` layers from / to the host's linear FP32 around it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from backends.engine.builder.config import BuilderFlag, MemoryPoolType
from backends.engine.builder.device_types import (DeviceType, EngineCapability, TensorFormat, dla_precision,  # noqa: F401
                                                  network_layer_facts, rule_context)
from backends.engine.engine_graph import Graph, Node, TensorInfo
from native.dla.formats import INPUT_FORMATS, OUTPUT_FORMATS, TRT_NAMES, packed_bytes, packed_shape
from native.dla.profiles import MAX_LOADABLES_PER_CORE, get_profile
from native.dla.rules import LayerFacts, Verdict, check, dla_batch, softmax_mode
from native.errors import BuildError
from native.logger import G_LOGGER

POOLS = {MemoryPoolType.DLA_MANAGED_SRAM: "managed SRAM", MemoryPoolType.DLA_LOCAL_DRAM: "local DRAM",
         MemoryPoolType.DLA_GLOBAL_DRAM: "global DRAM"}
CONV_KINDS = ("Convolution", "Deconvolution", "MatrixMultiply")


# engine-graph side -----------------------------------------------------------------------------------------------

def _names(node) -> set:
    return set(node.source_nodes or []) | set(node.name.split(" + ")) | {node.name}


def requested_device(node, config):
    """(DeviceType, explicit): explicit settings on any layer the node fused win (GPU over DLA), else the default."""
    set_types = [config.get_device_type(n) for n in _names(node) if config.is_device_type_set(n)]
    if set_types:
        return (DeviceType.GPU if DeviceType.GPU in set_types else DeviceType.DLA), True
    if config.engine_capability is EngineCapability.DLA_STANDALONE:
        return DeviceType.DLA, False
    return config.default_device_type, False


def node_facts(graph, node, config, shapes, ranges, consumers, outputs) -> LayerFacts:
    producers = graph.producers()
    dev, explicit = requested_device(node, config)
    constraint = node.meta.get("precision_constraint")
    params = dict(node.params)
    if node.kind in ("Cast", "Identity") and node.inputs:
        prod = producers.get(node.inputs[0])
        params["from_comparison"] = prod is not None and prod.kind == "ElementWise" and \
            prod.params.get("op") in ("EQUAL", "GREATER", "LESS")

    def const(name):
        p = producers.get(name)
        return p.weights.get("value") if p is not None and p.kind == "Constant" else None

    def consumer_facts(c):
        d, e = requested_device(c, config)
        return LayerFacts(c.name, c.kind, dict(c.params), precision=dla_precision(
            config, c.meta.get("precision_constraint")), explicit_dla=e and d is DeviceType.DLA,
            precision_set=c.meta.get("precision_constraint") is not None)

    cons = [c for o in node.outputs for c in consumers.get(o, [])]
    return LayerFacts(node.name, node.kind, params, node.weights,
                      [shapes.get(i) if i is not None else None for i in node.inputs],
                      [shapes.get(o) for o in node.outputs], [const(i) if i else None for i in node.inputs],
                      dla_precision(config, constraint), [ranges.get(i) for i in node.inputs],
                      [ranges.get(o) for o in node.outputs], [consumer_facts(c) for c in cons],
                      any(o in outputs for o in node.outputs), explicit and dev is DeviceType.DLA,
                      constraint is not None)


@dataclass
class Loadable:
    index: int
    nodes: list
    batch: int
    core: int = 0
    inputs: list = field(default_factory=list)     # boundary tensor names read from outside
    outputs: list = field(default_factory=list)    # body tensors read outside (or network outputs)
    pools: dict = field(default_factory=dict)      # pool name -> bytes needed

    @property
    def name(self):
        names = [n.name for n in self.nodes if n.kind != "Constant"]
        return "{ForeignNode[" + (names[0] if len(names) == 1 else f"{names[0]}...{names[-1]}") + "]}"


@dataclass
class DlaPlan:
    layers: list = field(default_factory=list)     # per node: {"node", "wanted", "dla", "rule", "reason"}
    loadables: list = field(default_factory=list)
    failed_pools: list = field(default_factory=list)  # (loadable, pool, need, limit)


def pool_limits(config, profile) -> dict:
    """The per-loadable pool limits (seed 000 L468–495): power of 2 and >= 4 KiB, else the loadable fails."""
    defaults = {MemoryPoolType.DLA_MANAGED_SRAM: profile.managed_sram, MemoryPoolType.DLA_LOCAL_DRAM:
                profile.local_dram, MemoryPoolType.DLA_GLOBAL_DRAM: profile.global_dram}
    out = {}
    for pool, default in defaults.items():
        v = config.get_memory_pool_limit(pool)
        v = default if v is None else int(v)
        if v < 4096 or v & (v - 1):
            raise BuildError(f"DLA memory pool {POOLS[pool]} ({pool.name}) limit {v} bytes is invalid: it must be a "
                             f"power of 2 and at least 4 KiB, or the loadable compile fails")
        out[pool] = v
    return out


def pool_needs(loadable, shapes, profile, precision) -> dict:
    """Our accounting: global DRAM holds the weights as stored (conv FP16/INT8; on Orin other layers' weights as
    FP19 in 4-byte containers with channels padded to 16 / 32), local DRAM the intermediates in kCHW16 / kCHW32,
    managed SRAM caches the largest single layer's working set (in and out)."""
    e = 1 if precision == "int8" else 2
    pad = 32 if precision == "int8" else 16
    weights = 0
    for n in loadable.nodes:
        for key, w in n.weights.items():
            w = np.asarray(w)
            if w.dtype.kind != "f":
                continue
            if n.kind in CONV_KINDS and key in ("kernel", "b"):
                weights += w.size * e
            elif profile.fp19_nonconv_weights:
                c = w.shape[0] if w.ndim else 1
                weights += (-(-c // pad) * pad) * (w.size // max(c, 1)) * 4
            else:
                weights += w.size * 2
    fmt = "chw32" if precision == "int8" else "chw16"
    internal = {o for n in loadable.nodes if n.kind != "Constant" for o in n.outputs} - set(loadable.outputs)
    local = sum(packed_bytes(shapes[t], fmt, precision) for t in internal if shapes.get(t) is not None)
    work = 0
    for n in loadable.nodes:
        ts = [t for t in list(n.inputs) + list(n.outputs) if t is not None and shapes.get(t) is not None]
        work = max(work, sum(packed_bytes(shapes[t], fmt, precision) for t in ts))
    return {MemoryPoolType.DLA_MANAGED_SRAM: work, MemoryPoolType.DLA_LOCAL_DRAM: local,
            MemoryPoolType.DLA_GLOBAL_DRAM: weights}


def plan_dla(graph, config, shapes: dict, ranges: dict | None = None, explicit_qdq: bool = False) -> DlaPlan:
    """Decide placement and loadables without changing the graph. `explicit_qdq`: the network was quantized with
    Q/DQ layers (the build has fused them away by now), which the DLA does not support."""
    ranges = ranges or {}
    ctx = rule_context(config)
    profile = ctx.profile
    consumers = graph.consumers()
    outputs = set(graph.output_names)
    plan = DlaPlan()
    dynamic = [(n, lo, hi) for p in config.profiles for n, (lo, _, hi) in p.shapes.items() if tuple(lo) != tuple(hi)]
    for node in graph.nodes:
        dev, explicit = requested_device(node, config)
        wanted = dev is DeviceType.DLA
        v = check(node_facts(graph, node, config, shapes, ranges, consumers, outputs), ctx)
        if v.ok and explicit_qdq and node.kind != "Constant":
            v = Verdict(False, "general.qdq", "[general.qdq] the network is explicitly quantized (Q/DQ layers); the "
                                              "DLA supports no explicit quantization: calibrate or set dynamic ranges")
        if v.ok and dynamic and node.kind != "Constant":
            name, lo, hi = dynamic[0]
            v = Verdict(False, "general.dynamic", f"[general.dynamic] input '{name}' has a dynamic profile (min "
                                                  f"{list(lo)}, max {list(hi)}); the DLA needs min = opt = max")
        plan.layers.append({"node": node, "wanted": wanted, "dla": wanted and v.ok, "rule": v.rule,
                            "reason": v.reason if wanted else "device type GPU (the host device)",
                            "notes": v.notes})
    on = {id(e["node"]) for e in plan.layers if e["dla"] and e["node"].kind != "Constant"}
    # constants go with their readers
    for e in plan.layers:
        n = e["node"]
        if n.kind == "Constant":
            readers = [c for o in n.outputs for c in consumers.get(o, [])]
            e["dla"] = bool(readers) and all(id(c) in on for c in readers)
            e["reason"] = "weights of the DLA layers that read it" if e["dla"] else "constant read on the host"
    # consecutive eligible layers (in topological order) form loadables, one batch size each
    runs, run, batch = [], [], None
    for e in plan.layers:
        n = e["node"]
        if n.kind == "Constant":
            continue
        if not e["dla"]:
            if run:
                runs.append((run, batch))
            run, batch = [], None
            continue
        out_shape = shapes.get(n.outputs[0]) if n.outputs else None
        b = dla_batch(out_shape) if out_shape else batch
        if run and b != batch:
            runs.append((run, batch))
            run = []
        run.append(n)
        batch = b
    if run:
        runs.append((run, batch))
    precision = dla_precision(config)
    limits = pool_limits(config, profile)
    for i, (nodes, b) in enumerate(runs):
        members = set(map(id, nodes))
        consts = [p for n in nodes for name in n.inputs if name is not None
                  for p in [graph.producers().get(name)] if p is not None and p.kind == "Constant"]
        seen = set()
        consts = [c for c in consts if not (id(c) in seen or seen.add(id(c)))]
        body_ids = members | set(map(id, consts))
        produced = {o for n in nodes for o in n.outputs} | {o for c in consts for o in c.outputs}
        ins = []
        for n in nodes:
            for name in n.inputs:
                if name is not None and name not in produced and name not in ins:
                    ins.append(name)
        outs = [o for n in nodes for o in n.outputs
                if o in outputs or any(id(c) not in body_ids for c in consumers.get(o, []))]
        ld = Loadable(i, consts + nodes, b, config.dla_core, ins, outs)
        ld.pools = pool_needs(ld, shapes, profile, precision)
        plan.loadables.append(ld)
    # at most 16 loadables per core: the smallest beyond that fall back
    if len(plan.loadables) > MAX_LOADABLES_PER_CORE:
        keep = sorted(plan.loadables, key=lambda ld: -len(ld.nodes))[:MAX_LOADABLES_PER_CORE]
        for ld in plan.loadables:
            if ld not in keep:
                _fall_back(plan, ld, "general.loadables", f"more than {MAX_LOADABLES_PER_CORE} loadables on DLA core "
                                                          f"{config.dla_core}; this subnetwork stays on the host")
        plan.loadables = [ld for ld in plan.loadables if ld in keep]
    for ld in list(plan.loadables):
        for pool, need in ld.pools.items():
            if pool is MemoryPoolType.DLA_MANAGED_SRAM:
                continue   # a cache: too small means more DRAM traffic, not a failed compile
            if need > limits[pool]:
                plan.failed_pools.append((ld, pool, need, limits[pool]))
                _fall_back(plan, ld, f"pool.{pool.value}", f"loadable {ld.name} needs {need} bytes of {POOLS[pool]} "
                                                           f"but the {pool.name} pool limit is {limits[pool]}")
                plan.loadables.remove(ld)
                break
    for i, ld in enumerate(plan.loadables):
        ld.index = i
    return plan


def _fall_back(plan, ld, rule, reason):
    ids = set(map(id, ld.nodes))
    for e in plan.layers:
        if id(e["node"]) in ids:
            e["dla"], e["rule"], e["reason"] = False, rule, f"[{rule}] {reason}"


def check_plan(plan, config):
    """Without GPU fallback every layer meant for the DLA must run there; standalone needs all of them in one."""
    standalone = config.engine_capability is EngineCapability.DLA_STANDALONE
    bad = [e for e in plan.layers if e["wanted"] and not e["dla"] and e["node"].kind != "Constant"]
    if bad and dla_precision(config) == "float32" and not config.get_flag(BuilderFlag.GPU_FALLBACK):
        raise BuildError("the DLA runs FP16 and INT8 only and neither is enabled: add --fp16 or --int8 "
                         "(BuilderFlag.FP16 / BuilderFlag.INT8)")
    for ld, pool, need, limit in plan.failed_pools:
        if not config.get_flag(BuilderFlag.GPU_FALLBACK) or standalone:
            raise BuildError(f"DLA loadable {ld.name} does not fit: the {POOLS[pool]} pool ({pool.name}) is too "
                             f"small: needs {need} bytes, limit {limit}; raise it with "
                             f"config.set_memory_pool_limit({pool}, ...)")
    if standalone:
        if not config.get_flag(BuilderFlag.DIRECT_IO):
            raise BuildError("DLA_STANDALONE needs BuilderFlag.DIRECT_IO (no reformatting at the loadable's I/O)")
        if dla_precision(config) == "float32":
            raise BuildError("DLA_STANDALONE needs BuilderFlag.FP16 and/or INT8: the DLA runs FP16 and INT8 only")
    if bad and (standalone or not config.get_flag(BuilderFlag.GPU_FALLBACK)):
        lines = "; ".join(f"layer '{e['node'].name}' ({e['node'].kind}, ONNX nodes {e['node'].source_nodes}): "
                          f"{e['reason']}" for e in bad[:5])
        if len(bad) > 5:
            import collections
            by_rule = collections.Counter(e["rule"] for e in bad)
            lines += f"; and {len(bad) - 5} more (by rule: {dict(by_rule.most_common())}; `debugkit inspect " \
                     f"capability MODEL --dla` lists them all)"
        what = "DLA_STANDALONE needs every layer on the DLA" if standalone else \
            "these layers cannot run on the DLA and GPU fallback is off"
        hint = "remove them from the network or build without DLA_STANDALONE" if standalone else \
            "enable BuilderFlag.GPU_FALLBACK (--allow-gpu-fallback) to run them on the host device"
        raise BuildError(f"{what} ({len(bad)} layer{'s' if len(bad) > 1 else ''}): {lines}. To fix: {hint}")
    if standalone and len(plan.loadables) != 1:
        raise BuildError(f"DLA_STANDALONE builds one loadable, this network splits into {len(plan.loadables)} "
                         f"(different batch sizes or host layers between them)")


def log_plan(plan, config, logger=G_LOGGER):
    n_dla = sum(1 for e in plan.layers if e["dla"] and e["node"].kind != "Constant")
    n_all = sum(1 for e in plan.layers if e["node"].kind != "Constant")
    limits = pool_limits(config, get_profile(config.dla_profile))
    sram = MemoryPoolType.DLA_MANAGED_SRAM   # a cache: each loadable uses at most its limit
    totals = {p: sum(min(ld.pools[p], limits[p]) if p is sram else ld.pools[p] for ld in plan.loadables)
              for p in POOLS}
    logger.info(f"DLA ({config.dla_profile}, core {config.dla_core}): {n_dla} of {n_all} layers on DLA; "
                f"{len(plan.loadables)} subnetwork candidates compiled to loadables; memory "
                + ", ".join(f"{POOLS[p]} {totals[p] / 2**20:.2f} MiB" for p in POOLS))
    for ld, pool, need, limit in plan.failed_pools:
        logger.warning(f"DLA loadable {ld.name} failed to compile: {POOLS[pool]} pool too small "
                       f"(needs {need} bytes, limit {limit})")
    for ld in plan.loadables:
        logger.verbose(f"DLA loadable {ld.index} {ld.name}: {len(ld.nodes)} layers, batch {ld.batch}; "
                       + ", ".join(f"{POOLS[p]} {ld.pools[p]} bytes" for p in POOLS))
    for e in plan.layers:
        if e["wanted"] and not e["dla"] and e["node"].kind != "Constant":
            if config.get_flag(BuilderFlag.GPU_FALLBACK) and \
                    config.engine_capability is not EngineCapability.DLA_STANDALONE:
                logger.warning(f"layer '{e['node'].name}' falls back to the host device: {e['reason']}")


# rewrite -------------------------------------------------------------------------------------------------------

def io_format(config, tensor_info, precision, direction, network_tensor=None):
    """The DLA format at a boundary: the network tensor's allowed formats where given, else kCHW16 / kCHW32."""
    allowed = INPUT_FORMATS[precision] if direction == "in" else OUTPUT_FORMATS[precision]
    mask = getattr(network_tensor, "allowed_formats", None)
    if mask:
        for fmt in allowed:
            if mask & (1 << int(TensorFormat[TRT_NAMES[fmt][1:]])):
                return fmt
        return None
    return "chw32" if precision == "int8" else "chw16"


def apply_dla(graph, config, shapes, ranges=None, network=None, logger=G_LOGGER) -> DlaPlan:
    """Plan, check, log, then rewrite the graph: loadables become DlaLoadable layers with reformats around them."""
    known = {name for n in graph.nodes for name in _names(n)}
    if network is not None:
        known |= {layer.name for layer in network.layers}
    unknown = sorted(set(config._device_types) - known)
    if unknown:
        logger.warning(f"device types were set for {unknown}, which name no layer or ONNX node of this network; "
                       f"layer names look like {sorted(known)[:3]}")
    qdq = network is not None and any(layer.kind in ("Quantize", "Dequantize") for layer in network.layers)
    plan = plan_dla(graph, config, shapes, ranges, qdq)
    for e in plan.layers:   # what `inspect capability` reports per engine layer
        e["node"].meta["dla"] = {"dla": e["dla"], "rule": e["rule"], "reason": e["reason"], "notes": e["notes"]}
    log_plan(plan, config, logger)
    check_plan(plan, config)
    profile = get_profile(config.dla_profile)
    precision = dla_precision(config)
    standalone = config.engine_capability is EngineCapability.DLA_STANDALONE
    ranges = ranges or {}
    net_tensors = {t.name: t for t in network.tensors.values()} if network is not None else {}
    for ld in plan.loadables:
        body = Graph(name=ld.name)
        body.inputs = [TensorInfo(t, "float32", shapes.get(t)) for t in ld.inputs]
        body.outputs = [TensorInfo(t, "float32", shapes.get(t)) for t in ld.outputs]
        for n in ld.nodes:   # the DLA's numerics replace the host's INT8 annotations (its own rounding rule)
            n.params = {k: v for k, v in n.params.items() if k != "int8"}
            n.params = dict(n.params, dla=_dla_params(n, config, profile, precision, shapes, ranges))
            n.precision = n.params["dla"]["precision"]
        body.set_nodes(list(ld.nodes))   # a new graph: the loadable's body
        members = set(map(id, ld.nodes))
        consumers = graph.consumers()
        # constants also read on the host stay there as well
        host_nodes = [n for n in graph.nodes if id(n) not in members or
                      (n.kind == "Constant" and any(id(c) not in members for o in n.outputs
                                                    for c in consumers.get(o, [])))]

        def desc(t, direction):
            fmt = io_format(config, None, precision, direction, net_tensors.get(t))
            if fmt is None:
                fmts = (INPUT_FORMATS if direction == "in" else OUTPUT_FORMATS)[precision]
                raise BuildError(f"DLA I/O tensor '{t}' allows no DLA format for {precision}; allow one of "
                                 f"{', '.join(TRT_NAMES[f] for f in fmts)}")
            r = ranges.get(t)
            return {"name": t, "format": fmt, "dtype": precision, "shape": list(shapes[t]),
                    "scale": max(abs(r[0]), abs(r[1])) / 127.0 if (precision == "int8" and r) else None}

        in_desc = [desc(t, "in") for t in ld.inputs]
        out_desc = [desc(t, "out") for t in ld.outputs]
        if precision == "int8" and any(d["scale"] is None for d in in_desc + out_desc):
            missing = [d["name"] for d in in_desc + out_desc if d["scale"] is None]
            raise BuildError(f"INT8 DLA loadable {ld.name} needs dynamic ranges for its I/O tensors {missing}; set "
                             f"tensor.dynamic_range or calibrate (IInt8EntropyCalibrator2)")
        params = {"core": ld.core, "profile": profile.name, "precision": precision, "batch": ld.batch,
                  "inputs": in_desc, "outputs": out_desc, "hwc4_align": profile.hwc4_w_align,
                  "pools": {p.value: ld.pools[p] for p in POOLS}}
        if standalone:
            lnode = Node(ld.name, "DlaLoadable", list(ld.inputs), list(ld.outputs), params,
                         subgraphs={"body": body},
                         source_nodes=[s for n in ld.nodes if n.kind != "Constant"
                                       for s in (n.source_nodes or [n.name])])
            new = [lnode]
            graph.inputs = [_packed_info(next(i for i in graph.inputs if i.name == d["name"]), d, profile)
                            for d in in_desc]
            graph.outputs = [_packed_info(next(o for o in graph.outputs if o.name == d["name"]), d, profile)
                             for d in out_desc]
        else:
            new = []
            lin = []
            for d in in_desc:
                t = f"{d['name']} [{TRT_NAMES[d['format']]}]"
                new.append(Node(f"Reformat {d['name']} to {TRT_NAMES[d['format']]}", "DlaReformat", [d["name"]], [t],
                                dict(d, direction="to_dla", hwc4_align=profile.hwc4_w_align)))
                lin.append(t)
            lout = [f"{d['name']} [{TRT_NAMES[d['format']]}]" for d in out_desc]
            new.append(Node(ld.name, "DlaLoadable", lin, lout, params, subgraphs={"body": body},
                            source_nodes=[s for n in ld.nodes if n.kind != "Constant"
                                          for s in (n.source_nodes or [n.name])]))
            for d, t in zip(out_desc, lout):
                new.append(Node(f"Reformat {d['name']} from {TRT_NAMES[d['format']]}", "DlaReformat", [t],
                                [d["name"]], dict(d, direction="from_dla")))
        for n in new:   # what the inspector shows: the loadable computes in the DLA precision
            n.precision = precision if n.kind == "DlaLoadable" or n.params.get("direction") == "to_dla" else "float32"
        # splice: the loadable (and its reformats) stand where its last layer stood
        on_host = set(map(id, host_nodes))
        graph.replace_nodes([n for n in graph.nodes if id(n) in members and id(n) not in on_host], new)
    graph.meta = dict(graph.meta or {}, dla={"loadables": len(plan.loadables), "profile": profile.name,
                                             "core": config.dla_core})
    return plan


def _packed_info(info, d, profile):
    shape = packed_shape(d["shape"], d["format"], d["dtype"], profile.hwc4_w_align)
    return TensorInfo(info.name, "float16" if d["dtype"] == "float16" else "int8", list(shape), {}, info.kind)


def _dla_params(n, config, profile, precision, shapes, ranges):
    def scale(t):
        r = ranges.get(t)
        return max(abs(r[0]), abs(r[1])) / 127.0 if r else None
    p = {"precision": n.meta.get("precision_constraint") if n.meta.get("precision_constraint") in ("float16", "int8")
         else precision, "profile": profile.name}
    if p["precision"] == "int8":
        p["in_scales"] = [scale(t) for t in n.inputs]
        p["out_scales"] = [scale(t) for t in n.outputs]
        key = "b" if n.kind == "MatrixMultiply" else "kernel"
        if n.kind in CONV_KINDS and key in n.weights:
            from native.dla.numerics import weight_axis, weight_scales
            w = n.weights[key]
            p["w_scale"] = weight_scales(w, weight_axis(n.kind, key, w, n.params)).tolist()
    if n.kind == "Softmax" and n.inputs and shapes.get(n.inputs[0]):
        s = shapes[n.inputs[0]]
        p["softmax_mode"] = softmax_mode(s, int(n.params.get("axis", -1)) % len(s))
    return p


def network_ranges(network) -> dict:
    return {t.name: tuple(t.dynamic_range) for t in network.tensors.values() if t.dynamic_range is not None}


def copy_graph(graph):
    return copy.deepcopy(graph)
