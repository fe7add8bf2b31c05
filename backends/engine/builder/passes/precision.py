"""Precision assignment: which precision every layer computes in, what every tensor is stored as, and the explicit
Reformat layers wherever a producer and a consumer disagree.

1. Compute precision per layer. The enabled precisions come from the builder flags (FP16, BF16, FP8 with FP16 as
   its companion, INT8); the precisions a layer can run in are those its tactics declare. Without a constraint the
   device decides: a device that `chooses_by_timing` (CUDA) times the layer's best tactic in each candidate
   precision, adds the Reformat layers the choice would put at its inputs (given the producers already decided, in
   topological order) and at network outputs, and takes the fastest (`choose_by_timing`; a flag PERMITS a precision,
   it does not force it); the CPU and the DLA keep their rule (`Device.choose_precision`: the lowest enabled
   precision the layer implements, else the next one up). A constraint (`layer.precision`, `--layer-precisions`) is obeyed under
   OBEY_PRECISION_CONSTRAINTS (an impossible one is a build error naming the layer), followed where possible under
   PREFER (a warning where not), and without either flag honoured only where the device would not choose a faster
   (lower) precision, as TensorRT does; a warning names the layer otherwise. One accuracy rule follows the
   device's choice: an FP16 layer computing a Sigmoid/Softmax/Exp network output runs in FP32 unless constrained
   (passes/probability_outputs.py says why; BuilderFlag.REDUCED_PROBABILITY_OUTPUTS turns it off).
2. Storage per float tensor: what its producer computes in (FP16 and FP8 layers write float16, BF16 layers
   bfloat16), unless `layer.set_output_type(i, t)` says otherwise. Constants take the type their consumers read.
   Network outputs keep the type the network declares (float32 unless `tensor.dtype` was set), tensors read by
   a loop or conditional body stay float32.
3. Reformat layers convert a tensor where a reader expects another storage type (network inputs into FP16 layers,
   FP16 layers into FP32-only ones, the last layers into FP32 network outputs). They are ordinary layers: the
   inspector lists them and the plan stores them.

TF32 is not a storage type: with the TF32 flag, FP32 conv/matmul layers round their GEMM operands to TF32
(`node.meta["math"] = "tf32"`); everything else stays exact FP32.
"""
from __future__ import annotations

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.probability_outputs import precision_for, probability_layers
from backends.engine.builder.timed_choice import (Probe, chooses_by_timing, pick_int8, pick_precision, replay_entry,
                                                  variant)
from backends.engine.engine_graph import Node
from native.errors import BuildError
from native.precision import LADDER, STORAGE, Precision, as_precision
from native.tactics import tactics_for

# what a layer of each precision stores its float outputs as, and expects its float inputs in
# (INT8 layers read and write float32 arrays holding dequantized values: native/cpu/kernels/conv_int8.py)
STORAGE_OF = STORAGE
# layer kinds whose GEMM operands the TF32 flag rounds
TF32_KINDS = ("Convolution", "ConvolutionNHWC", "Deconvolution", "MatrixMultiply", "Einsum")
# layer kinds whose precision a device that chooses by timing measures (compute-bound: tensor-core kernels really
# differ); every other layer takes the rule. Event-timing a small launch-bound kernel from Python measures launch
# gaps (tens of us), not GPU work, so a Reformat there seems to cost more than the layer, and FP16 engines of small
# or memory-bound layers would silently run FP32 (and hide the FP16 problems they are built to find).
TIMED_KINDS = TF32_KINDS + ("Attention",)
FLAG_NAMES = {"float16": "FP16 (--fp16)", "bfloat16": "BF16 (--bf16)", "fp8": "FP8 (--fp8)", "int8": "INT8 (--int8)"}

def tf32_math(kind, precision, tf32) -> str | None:
    """The math a layer of `kind` computing in `precision` runs with: "tf32" for FP32 conv/matmul layers of a TF32
    build, else None (exact). Every pass that times a layer asks here, so what is timed is what will run."""
    return "tf32" if tf32 and precision == "float32" and kind in TF32_KINDS else None


def enabled_precisions(config) -> set:
    """The reduced precisions the build's flags enable (BuilderConfig.enabled_precisions, the one answer)."""
    return set(config.enabled_precisions())


def constraint_mode(config) -> str:
    if config.get_flag(BuilderFlag.OBEY_PRECISION_CONSTRAINTS):
        return "obey"
    if config.get_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS):
        return "prefer"
    return "none"


def _device(config):
    return config.device


def _is_float32(dtype) -> bool:
    return dtype in (None, "float32")


def tensor_dtypes(graph) -> dict:
    """The model's dtype of every tensor (ONNX shape inference; unknown ones follow the node's first input)."""
    dt = {t.name: t.dtype for t in graph.inputs}
    dt.update({k: v.dtype for k, v in graph.tensor_info.items() if v.dtype is not None})
    for n in graph.nodes:
        if n.kind == "Constant" and "value" in n.weights:
            dt[n.outputs[0]] = n.weights["value"].dtype.name
        first = next((dt.get(i) for i in n.inputs if i is not None), "float32")
        for o in n.outputs:
            if dt.get(o) is None:
                dt[o] = first
    # a network output the user declared FP16/BF16 (`tensor.dtype = DataType.HALF`) is computed as float32 data and
    # stored in the declared type (step 4)
    producers = graph.producers()
    for out in graph.outputs:
        p = producers.get(out.name)
        if out.dtype in ("float16", "bfloat16") and p is not None and p.kind != "Cast" and any(
                dt.get(i) == "float32" for i in p.inputs if i is not None):
            dt[out.name] = "float32"
    return dt


def data_inputs(node, device) -> list:
    """Indices of the node's inputs that carry float data in its compute precision."""
    idx = device.data_inputs(node.kind, len(node.inputs))
    return [i for i in idx if i < len(node.inputs) and node.inputs[i] is not None]


def _implemented(node, device_name) -> set:
    out = set()
    for t in tactics_for(node.kind, device_name):
        out |= set(t.precisions or ("float32",))
    return out


def _describe(node) -> str:
    src = f", ONNX node{'s' if len(node.source_nodes) > 1 else ''} {', '.join(node.source_nodes)}" \
        if node.source_nodes and node.source_nodes != [node.name] else ""
    return f"layer '{node.name}' ({node.kind}{src})"


def candidate_precisions(device, implemented, enabled) -> list:
    """The precisions an unconstrained layer may run in, reduced ones first (the ladder's order), float32 last."""
    return [p for p in LADDER if p in implemented and p in enabled and p != "int8"] + [Precision.FP32]


def choose(node, device, implemented, enabled, mode, logger, timed=None) -> str:
    """The layer's compute precision (see the module docstring, step 1). `timed`: what timing chose for it."""
    enabled = enabled - {"int8"}          # INT8 needs scales: passes/int8.py decides it, before this pass
    implemented = implemented - {"int8"}
    choice = timed if timed is not None else device.choose_precision(node.kind, implemented, enabled)
    raw = node.meta.get("precision_constraint")
    if raw is None:
        if enabled and choice == "float32" and not (implemented & enabled):
            logger.verbose(f"{_describe(node)} runs in float32: {device.fp32_only_reason(node.kind)}")
        return choice
    want = as_precision(raw)
    problem = None
    if want == "int8":
        problem = ("but INT8 needs a scale for its input and an INT8 implementation of this layer (calibration, "
                   "tensor.set_dynamic_range or Q/DQ; see the INT8 sections of docs/PRECISION.md)")
    elif want not in implemented:
        problem = (f"has no {want} implementation on device '{device.name}' "
                   f"({device.fp32_only_reason(node.kind)}); it can run in {'/'.join(sorted(implemented))}")
    elif want != "float32" and want not in enabled:
        problem = f"but {want} is not enabled: set the builder flag {FLAG_NAMES.get(want, want)}"
    if problem:
        msg = f"{_describe(node)} is constrained to {want} {problem}"
        if mode == "obey":
            raise BuildError(msg + " (OBEY_PRECISION_CONSTRAINTS)")
        logger.warning(msg + f"; it runs in {choice}")
        return choice
    if mode == "none":
        ladder = list(LADDER)
        if ladder.index(want) > ladder.index(choice):
            logger.warning(f"{_describe(node)}: precision constraint {want} ignored, {choice} is faster; set "
                           f"PREFER_PRECISION_CONSTRAINTS or OBEY_PRECISION_CONSTRAINTS (--precision-constraints "
                           f"prefer|obey) to apply it")
            return choice
    return want


def fixed_reads(graph, device, enabled, dtypes) -> dict:
    """{tensor: the storage types its readers need whose precision is fixed before timing (INT8 layers, layers
    with FP32 as their only option)}: a producer's choice pays for the reformats towards them."""
    out = {}
    for c in graph.nodes:
        if c.kind == "Constant" or c.meta.get("precision_constraint") is not None:
            continue
        if (c.precision != "int8" or int8_is_permission(c)) and \
                candidate_precisions(device, _implemented(c, device.name), enabled) != ["float32"]:
            continue
        for i in data_inputs(c, device):
            if _is_float32(dtypes.get(c.inputs[i])):
                out.setdefault(c.inputs[i], set()).add(STORAGE_OF.get(c.precision, "float32"))
    return out


def choose_by_timing(node, options, probe, storage, dtypes, device, declared, tf32, logger, fixed=None,
                     made=frozenset()):
    """The fastest of `options` for this layer (step 1 on a device that chooses by timing), or None when it cannot
    be measured (a tensor the probe run did not produce). `storage`: what each tensor decided so far is stored as;
    `declared`: {network output: its declared type}; `fixed`: fixed_reads(); `made`: the (tensor, storage)
    conversions earlier readers already pay for (step 4 makes one per pair). Records node.meta["precision_ms"] and
    logs what was timed."""
    data = set(data_inputs(node, device))
    costs, said = {}, {}
    for p in options:
        want = STORAGE_OF[p]
        v = variant(node, precision=p)
        if p != "int8" and "int8" in node.params:      # the INT8 layer's float alternative
            v.params = {k: val for k, val in node.params.items() if k != "int8"}
        v.meta.pop("math", None)
        if tf32_math(node.kind, p, tf32):
            v.meta["math"] = "tf32"
        inputs, reformat = [], 0.0
        for i, name in enumerate(node.inputs):
            val = probe.env.get(name) if name is not None else None
            if name is not None and val is None:
                probe.untimed.append(f"{_describe(node)}: tensor '{name}' is missing from the run at opt shapes")
                return None
            if i in data and _is_float32(dtypes.get(name)):
                have = storage.get(name)      # None: a constant, stored as its readers need
                if have is not None and have != want and (name, want) not in made:
                    reformat += probe.reformat_ms(val, have, want)
                val = probe.value_as(val, want)
            inputs.append(val)
        m = probe.best(v, inputs)
        if m is None:
            continue
        for o in node.outputs:
            if not _is_float32(dtypes.get(o)) or o not in probe.env:
                continue
            for reader in {declared.get(o), *(fixed or {}).get(o, ())} - {None, want}:
                reformat += probe.reformat_ms(probe.env[o], want, reader)
        costs[p] = (m.host, m.ms + reformat)
        said[p] = f"{p} {m.ms:.3f} ms ({m.tactic}{', host layer' if m.host else ''})" + \
            (f" + {reformat:.3f} ms reformats" if reformat else "")
    choice = pick_int8(costs) if "int8" in costs else pick_precision(costs)
    if choice is None:
        probe.untimed.append(f"{_describe(node)}: no tactic ran it in {'/'.join(options)} ({probe.why or 'see -v'})")
        return None
    node.meta["precision_ms"] = {p: round(c[1], 4) for p, c in costs.items()}
    logger.verbose(f"{_describe(node)}: timed {'; '.join(said.values())} -> {choice}")
    return choice


def int8_is_permission(node) -> bool:
    """An INT8 layer the timing may move to a float precision: implicit quantization (calibration or dynamic
    ranges), no INT8 constraint. Explicit Q/DQ layers run INT8 as the model's Q/DQ say (TensorRT's rule)."""
    p = node.params.get("int8") or {}
    return bool(p.get("narrow_weights")) and node.meta.get("precision_constraint") is None


def _int8_by_timing(node, probe, have, dtypes, device, declared, tf32, logger, fixed, made, enabled):
    """For an implicit INT8 layer on a device that chooses by timing: "int8", or the float precision that is
    faster counting the Reformat layers at its edges (the INT8 flag permits INT8, it does not order it); the
    layer's INT8 parameters go when it leaves INT8, and meta["int8_note"] says why. None: not timed."""
    if probe is None or node.kind not in TIMED_KINDS or not int8_is_permission(node) or node.meta.get("int8_io"):
        return None     # (int8 I/O layers: their speed is the int8 tensors around them; passes/int8_io.py)
    floats = candidate_precisions(device, _implemented(node, device.name), enabled)
    entry = replay_entry(getattr(probe.config, "algorithm_selector", None), node.name)
    if entry is not None and entry.get("precision") in ["int8"] + floats:
        timed = entry["precision"]
    else:
        try:
            timed = choose_by_timing(node, ["int8"] + floats, probe, have, dtypes, device, declared, tf32, logger,
                                     fixed, made)
        except Exception as e:
            logger.warning(f"precision: timing {_describe(node)} in INT8 failed ({type(e).__name__}: "
                           f"{str(e)[:300]}); it stays INT8")
            return None
    if timed is None or timed == "int8":
        return timed
    ms = node.meta.get("precision_ms") or {}
    why = f"{timed} is faster" + (f" ({ms[timed]:.3f} ms vs INT8 {ms['int8']:.3f} ms, reformats included)"
                                  if timed in ms and "int8" in ms else " (replay file)")
    node.meta["int8_note"] = f"not INT8: {why}"
    node.params = {k: v for k, v in node.params.items() if k != "int8"}
    logger.verbose(f"{_describe(node)} runs {timed}, not INT8: {why}")
    return timed


def time_int8_layers(graph, config, logger, ctx) -> int:
    """Before the layout pass, on a device that chooses by timing: each implicit INT8 Conv/Gemm against the enabled
    float precisions (still NCHW: the layout pass may then make a float layer NHWC, and faster). Storage is
    predicted as the precision pass would make it (INT8 layers float32, the others the lowest enabled float
    type), so the Reformat layers at an INT8 chain's edges count. A layer leaving INT8 becomes a float layer like
    any other (the precision pass times its float precision). Returns how many left INT8."""
    enabled = enabled_precisions(config) & config.device.precisions
    candidates = [n for n in graph.nodes if n.precision == "int8" and n.kind in TIMED_KINDS and int8_is_permission(n)
                  and not n.meta.get("int8_io")]
    stashed = ctx.state.pop("int8_probe", None)    # the INT8 I/O pass's run of this graph (passes/int8_io.py)
    if not candidates:
        return 0
    probe = _probe(graph, ctx, enabled, logger, reuse=stashed)
    if probe is None:
        return 0
    device, dtypes = config.device, tensor_dtypes(graph)
    floats = [p for p in LADDER if p in enabled and p != "int8"]
    guess = STORAGE_OF[floats[0]] if floats else "float32"
    have = {t.name: (t.dtype or "float32") for t in graph.inputs}
    declared = {t.name: (t.dtype or "float32") for t in graph.outputs}
    moved, timed_ids = 0, {id(c) for c in candidates}
    for node in graph.nodes:
        if node.precision == "int8" and id(node) in timed_ids:
            timed = _int8_by_timing(node, probe, have, dtypes, device, declared, config.get_flag(BuilderFlag.TF32),
                                    logger, {}, set(), enabled)
            if timed not in (None, "int8"):
                node.precision = "float32"       # a float layer now: the precision pass chooses which
                node.meta["int8_precision_ms"] = dict(node.meta.pop("precision_ms", None) or {})
                moved += 1
        for o in node.outputs:
            if _is_float32(dtypes.get(o)) and node.kind != "Constant":
                have[o] = "float32" if node.precision == "int8" else guess
    if moved:
        logger.info(f"INT8: {moved} of {len(candidates)} INT8 layers time faster in a float precision and leave INT8 "
                    f"(before the layout pass; -v: each one's timings)")
    return moved


def _reformat_node(src, dst, from_type, to_type) -> Node:
    return Node(name=f"Reformat {src} {from_type}->{to_type}", kind="Reformat", inputs=[src], outputs=[dst],
                params={"from": from_type, "to": to_type}, precision=as_precision(to_type),
                meta={"output_types": [to_type]})


def _probe(graph, ctx, enabled, logger, reuse=None):
    """A Probe (builder/timed_choice.py) when this build chooses precisions by timing, else None; `reuse`: a
    Probe of this graph made earlier in the build (its run is not repeated)."""
    if ctx is None or not enabled or not chooses_by_timing(ctx.config):
        return None
    if not ctx.config.precision_by_timing:
        logger.verbose("precision: not chosen by timing (precision_by_timing is off): every layer gets the "
                       "device's rule, the lowest enabled precision it implements")
        return None
    if reuse is not None:
        return reuse
    try:
        return Probe(graph, ctx)
    except Exception as e:
        logger.warning(f"precision: the run that feeds precision timing failed ({str(e)[:300]}); layers get the "
                       f"device's precision rule instead (lowest enabled precision implemented)")
        return None


def assign_precision(graph, config, logger, ctx=None) -> int:
    """Set node.precision and storage types, insert Reformat layers; returns how many reformats were inserted.
    `ctx` (the pass context) lets a device that chooses by timing measure the options."""
    if config.uses_dla():
        # a DLA build: the DLA pass (passes/dla.py) gives DLA layers their precision and reformats; the layers
        # left on the host run in FP32
        for node in graph.nodes:
            node.precision = "float32"
        return 0
    device = _device(config)
    enabled = enabled_precisions(config) & device.precisions   # what the flags allow and the device can run
    mode = constraint_mode(config)
    tf32 = config.get_flag(BuilderFlag.TF32)
    dtypes = tensor_dtypes(graph)
    nodes = list(graph.nodes)
    probe = _probe(graph, ctx, enabled, logger)
    fixed = fixed_reads(graph, device, enabled, dtypes) if probe is not None else {}
    have = {t.name: (t.dtype or "float32") for t in graph.inputs}   # storage decided so far (timing's reformats)
    declared = {t.name: (t.dtype or "float32") for t in graph.outputs}
    timed_layers = replayed = 0
    made = set()    # (tensor, storage) conversions step 4 will make, as chosen so far
    probabilities = probability_layers(graph, enabled, config)   # kept FP32 (that module says why)
    # 1. compute precision
    for node in nodes:
        node.meta.pop("math", None)
        if not node.meta.get("int8_io"):     # (int8 I/O layers keep what passes/int8_io.py timed)
            node.meta.pop("precision_ms", None)
        ran_in = node.precision      # what the probe's run (and earlier runs) ran it in
        timed = None
        if node.precision == "int8":  # chosen by passes/int8.py, which knows the scales
            timed = _int8_by_timing(node, probe, have, dtypes, device, declared, tf32, logger, fixed, made, enabled)
            if timed in (None, "int8"):
                _stored(node, have, dtypes)
                continue
            timed_layers += 1
        float_io = any(_is_float32(dtypes.get(node.inputs[i])) for i in data_inputs(node, device)) or any(
            _is_float32(dtypes.get(o)) for o in node.outputs)
        if node.kind == "Constant" or not float_io:
            node.precision = "float32"
            continue
        implemented = _implemented(node, device.name)
        options = candidate_precisions(device, implemented, enabled)
        # a constraint is timed too without PREFER/OBEY: it is then honoured only where it is not slower
        if timed is None and probe is not None and len(options) > 1 and node.kind in TIMED_KINDS \
                and (node.meta.get("precision_constraint") is None or mode == "none") \
                and id(node) not in probabilities:   # the rule decides those: nothing to time
            entry = replay_entry(config.algorithm_selector, node.name)
            if entry is not None and entry.get("precision") in options:
                timed = entry["precision"]
                replayed += 1
                logger.verbose(f"{_describe(node)}: {timed} from the replay file")
            else:
                try:
                    timed = choose_by_timing(node, options, probe, have, dtypes, device, declared, tf32, logger,
                                             fixed, made)
                except Exception as e:   # the build goes on with the rule; the warning says where timing broke
                    logger.warning(f"precision: timing {_describe(node)} failed ({type(e).__name__}: "
                                   f"{str(e)[:300]}); it and the layers after it get the device's rule")
                    probe = None
                timed_layers += timed is not None
        node.precision = choose(node, device, implemented, enabled, mode, logger, timed)
        early = node.meta.pop("int8_precision_ms", None)    # time_int8_layers moved it out of INT8: keep why
        if early and "int8" in early:
            node.meta["precision_ms"] = {"int8": early["int8"], **(node.meta.get("precision_ms") or
                                                                   {k: v for k, v in early.items() if k != "int8"})}
        if id(node) in probabilities:
            node.precision = precision_for(node, node.precision, probabilities[id(node)], logger)
        if node.precision != ran_in:    # what refused the runs in another precision may run this one (a strict-FP32
            node.meta.pop("refused_at_build", None)    # cuDNN plan that failed to build, while its FP16 plan builds)
        if tf32_math(node.kind, node.precision, tf32):
            node.meta["math"] = "tf32"
        _stored(node, have, dtypes)
        want = STORAGE_OF.get(node.precision, "float32")
        made |= {(node.inputs[i], want) for i in data_inputs(node, device) if have.get(node.inputs[i]) not in
                 (None, want) and _is_float32(dtypes.get(node.inputs[i]))}
    if probe is not None:
        logger.info(f"precision: chosen by timing for {timed_layers} layers ({probe.timed} variants timed, the "
                    f"rest from the timing cache)" + (f", {replayed} from the replay file" if replayed else ""))
        if probe.untimed:
            logger.warning(f"precision: {len(probe.untimed)} layer(s) could not be timed and follow the device's "
                           f"rule instead (lowest enabled precision implemented); first: {probe.untimed[0]}")
    # 2. storage of every float32-typed tensor: what its producer writes
    storage = {t.name: (t.dtype or "float32") for t in graph.inputs}
    subgraph_reads = set()
    for node in nodes:
        for sub in node.subgraphs.values():
            subgraph_reads |= sub.outer_references()
    for node in nodes:
        if node.kind == "Constant":
            continue
        if isinstance(node.meta.get("output_types"), dict):  # layer.set_output_type(i, t), from lowering
            node.meta["output_type_constraints"] = node.meta.pop("output_types")
        explicit = node.meta.get("output_type_constraints") or {}
        types = []
        for i, o in enumerate(node.outputs):
            if not _is_float32(dtypes.get(o)):
                types.append(None)
                continue
            t = explicit.get(i, explicit.get(str(i)))
            t = as_precision(t) if t is not None else STORAGE_OF.get(node.precision, "float32")
            if o in subgraph_reads:
                t = "float32"
            storage[o] = t
            types.append(t if t != "float32" or node.precision != "float32" else None)
        node.meta["output_types"] = types if any(types) else None
        if node.meta["output_types"] is None:
            node.meta.pop("output_types")
    # 3. what each reader expects; constants take their readers' type
    consumers = graph.consumers()
    expected = {}  # (node, input index) -> storage type

    def wants(node, i):
        name = node.inputs[i]
        if not _is_float32(dtypes.get(name)) or i not in data_inputs(node, device):
            return None
        return STORAGE_OF.get(node.precision, "float32")

    for node in nodes:
        for i, name in enumerate(node.inputs):
            if name is not None:
                w = wants(node, i)
                if w is not None:
                    expected[(id(node), i)] = w
    for node in nodes:
        if node.kind != "Constant" or not _is_float32(dtypes.get(node.outputs[0])):
            continue
        name = node.outputs[0]
        readers = {expected.get((id(c), i)) for c in consumers.get(name, []) for i, n in enumerate(c.inputs)
                   if n == name}
        readers.discard(None)
        t = readers.pop() if len(readers) == 1 and name not in subgraph_reads else "float32"
        storage[name] = t
        if t != "float32":
            node.weights = dict(node.weights, value=_constant_in(node.weights["value"], t, ctx))
            node.precision = as_precision(t)
    # 4. reformats before readers that expect another type, and before network outputs
    inserted, made = 0, {}
    for node in nodes:
        inputs = list(node.inputs)
        for i, name in enumerate(node.inputs):
            want = expected.get((id(node), i))
            have = storage.get(name)
            if want is None or have is None or want == have:
                continue
            key = (name, want)
            if key not in made:
                made[key] = f"{name} ({want})"
                graph.insert_before(node, _reformat_node(name, made[key], have, want))
                inserted += 1
            inputs[i] = made[key]
        if inputs != node.inputs:
            graph.set_inputs(node, inputs)
    for out in graph.outputs:
        have, want = storage.get(out.name), out.dtype or "float32"
        prod = graph.producer(out.name)
        if have is None or have == want or prod is None:
            continue
        internal = f"{out.name} ({have})"
        readers = [n for n in graph.users(out.name) if out.name in n.inputs]
        graph.set_outputs(prod, [internal if o == out.name else o for o in prod.outputs])
        for n in readers:
            graph.set_inputs(n, [internal if x == out.name else x for x in n.inputs])
        graph.insert_after(prod, _reformat_node(internal, out.name, have, want))
        inserted += 1
    _log_summary(graph, enabled, inserted, logger)
    _log_int8(graph, logger)
    return inserted


def _constant_in(value, storage, ctx):
    """A constant's value stored in `storage`. The builds of one network (a search's probes) share the cast: the
    same array comes back for the same value, so the next build sees an unchanged layer (builder/selection_memo.py)
    and does not cast it again."""
    from native.numerics import to_storage
    network = ctx.state.get("network") if ctx is not None else None
    if network is None:
        return to_storage(value, storage)
    memo = network.__dict__.setdefault("_stored_constants", {})
    hit = memo.get((id(value), storage))
    if hit is not None and hit[0] is value:
        return hit[1]
    out = to_storage(value, storage)
    memo[(id(value), storage)] = (value, out)   # the value kept alive: its id is not reused while memoised
    return out


def _log_int8(graph, logger):
    """INT8 builds: how many Conv/Gemm layers run INT8, and why the first few others do not (all of them: -v)."""
    noted = [n for n in graph.nodes if n.meta.get("int8_note")]
    if not noted:
        return
    int8 = sum(n.precision == "int8" for n in noted)
    others = [n for n in noted if n.precision != "int8"]
    logger.info(f"INT8: {int8} of {len(noted)} convolution/GEMM layers run INT8"
                + (f"; {len(others)} {'does' if len(others) == 1 else 'do'} not: " + "; ".join(f"'{n.name}' runs {n.precision} "
                                                         f"({n.meta['int8_note'][len('not INT8: '):]})"
                                                         for n in others[:3])
                   + (" ..." if len(others) > 3 else "") if others else ""))
    for n in others[3:]:
        logger.verbose(f"INT8: '{n.name}' runs {n.precision} ({n.meta['int8_note']})")


def _stored(node, have, dtypes):
    """Record what the node's float outputs will be stored as (step 2's rule; constants: as their readers need)."""
    if node.kind == "Constant":
        return
    explicit = node.meta.get("output_types") if isinstance(node.meta.get("output_types"), dict) else \
        node.meta.get("output_type_constraints") or {}
    for i, o in enumerate(node.outputs):
        if _is_float32(dtypes.get(o)):
            t = explicit.get(i, explicit.get(str(i)))
            have[o] = as_precision(t) if t is not None else STORAGE_OF.get(node.precision, "float32")


def _log_summary(graph, enabled, inserted, logger):
    if not enabled:
        return
    counts = {}
    for n in graph.nodes:
        if n.kind not in ("Reformat", "Constant"):
            counts[n.precision] = counts.get(n.precision, 0) + 1
    logger.info("precision: " + ", ".join(f"{v} layers in {k}" for k, v in sorted(counts.items()))
                + f"; {inserted} reformat layers")
