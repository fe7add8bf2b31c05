"""The plan header's schema: what a plan's JSON header must hold before anything is built from it.

Checksums protect a plan against accidents, not against a crafted file: a header with valid CRCs can still hold a
wrong type, a missing key, a list where a dict belongs, a weight reference outside the blob, a layer reading a tensor
nobody produces, or a layer kind no kernel implements. `check_header(header, blob_len)` finds every such defect and
raises one PlanError whose first line names the first one by its field path (`graph.nodes[3].weights.kernel.offset`).

The schema is a declarative table of small combinators (`Obj`, `List`, `Map`, `Int`, `Str`, ...). To add a header
field, add a line to the table it belongs to: `HEADER`, `BUILD_CONFIG`, `DEVICE`, `GRAPH`, `NODE`, `NODE_META` or
`PARAMS[kind]`. A key written `"?name"` is optional. `Obj(..., extra=True)` tolerates keys it does not list: that is
the rule for sections the loader only displays (producer, device fingerprint, build config, metadata), never for
sections it builds from (tensors, nodes, weights).
"""
from __future__ import annotations

import math

from backends.engine.params import params_schema
from backends.engine.schema import Any, Bool, Int, Lazy, List, Map, Null, Num, Obj, OneOf, Opt, Schema, Str  # noqa: F401
from native.device import registered_devices
from native.errors import PlanError
from native.limits import default_limits
from native.tactics import registered_kinds, tactics_for

MAX_DEPTH = 32          # subgraph nesting
MAX_RANK = 32
MAX_DIM = 2 ** 40
MAX_SPATIAL = 2 ** 16   # padding + kernel per axis, where a layer's shapes are not recorded


# ---------------------------------------------------------------------------------------------------------------
# the tables

DTYPES = {"float32", "float16", "float64", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "bool", "complex64", "complex128", "object", "str", "float8_e4m3fn", "float8_e5m2",
          "float8_e4m3fnuz", "float8_e5m2fnuz", "int4", "uint4", "float4_e2m1fn"}
PRECISIONS = {"float32", "float16", "bfloat16", "tf32", "int8", "fp8", "float64", "int32", "int64", "bool", "int4",
              "float8_e4m3fn", "uint8"}
KINDS = {"tensor", "sequence", "optional"}

DIM = Int(-1, MAX_DIM)
SHAPE = List(DIM, max_len=MAX_RANK)
STATIC_SHAPE = List(Int(0, MAX_DIM), max_len=MAX_RANK)

TENSOR = Obj({"name": Str(nonempty=True), "?dtype": Opt(Str(choices=DTYPES)), "?shape": Opt(SHAPE),
              "?dim_names": Map(Str()), "?kind": Str(choices=KINDS)})

RAW_WEIGHT = Obj({"offset": Int(0), "nbytes": Int(0), "dtype": Str(choices=DTYPES - {"object", "str"}),
                  "shape": STATIC_SHAPE})
JSON_WEIGHT = Obj({"encoding": Str(choices={"json"}), "dtype": Str(choices={"object"}), "shape": STATIC_SHAPE,
                   "values": List(Str())})
WEIGHT = OneOf(RAW_WEIGHT, JSON_WEIGHT, pick=lambda v: 1 if isinstance(v, dict) and "encoding" in v else 0)

POST_OP = Obj({"op": Str(nonempty=True), "?weight": Str(), "?axis": Int(-MAX_RANK, MAX_RANK), "?type": Str(),
               "?alpha": Opt(Num()), "?beta": Opt(Num())}, extra=True)
POST_OPS = List(POST_OP)
INTS = List(Int(-MAX_DIM, MAX_DIM))
AXIS = Int(-MAX_RANK, MAX_RANK)
SPATIAL = {"?kernel_shape": Opt(List(Int(1, MAX_DIM))), "?strides": Opt(List(Int(1, MAX_DIM))),
           "?dilations": Opt(List(Int(1, MAX_DIM))), "?pre_padding": Opt(List(Int(0, MAX_DIM))),
           "?post_padding": Opt(List(Int(0, MAX_DIM))), "?output_padding": Opt(List(Int(0, MAX_DIM))),
           "?output_shape": Opt(List(Int(0, MAX_DIM))), "?window": Opt(List(Int(1, MAX_DIM))), "?post_ops": Opt(POST_OPS), "?auto_pad": Opt(Str(choices={"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}))}

# params per layer kind: the fields the loader or the kernels rely on; other keys are the kernels' own business.
PARAMS = {
    "Convolution": Obj({**SPATIAL, "?groups": Int(1, MAX_DIM), "?num_output_maps": Int(0, MAX_DIM)}, extra=True),
    "ConvolutionNHWC": Obj({**SPATIAL, "?groups": Int(1, MAX_DIM), "?num_output_maps": Int(0, MAX_DIM)}, extra=True),
    "Deconvolution": Obj({**SPATIAL, "?groups": Int(1, MAX_DIM), "?num_output_maps": Int(0, MAX_DIM)}, extra=True),
    "Pooling": Obj({**SPATIAL, "?window": Opt(List(Int(1, MAX_DIM))), "?type": Str()}, extra=True),
    "PoolingNHWC": Obj({**SPATIAL, "?window": Opt(List(Int(1, MAX_DIM))), "?type": Str()}, extra=True),
    "MatrixMultiply": Obj({"?transpose_a": Bool(), "?transpose_b": Bool(), "?post_ops": POST_OPS}, extra=True),
    "ElementWise": Obj({"op": Str(nonempty=True), "?post_ops": POST_OPS}, extra=True),
    "Activation": Obj({"?type": Str(nonempty=True), "?alpha": Opt(Num()), "?beta": Opt(Num())}, extra=True),
    "Reduce": Obj({"?op": Str(nonempty=True), "?axes": Opt(List(AXIS)), "?keep_dims": Bool(),
                   "?noop_with_empty_axes": Bool()}, extra=True),
    "Softmax": Obj({"?axis": AXIS}, extra=True),
    "Concatenation": Obj({"?axis": AXIS}, extra=True),
    "Gather": Obj({"?axis": AXIS, "?mode": Str()}, extra=True),
    "Constant": Obj({"?shape": STATIC_SHAPE}, extra=True),
}

NODE_META = Obj({"?input_shapes": Opt(List(Opt(SHAPE))), "?output_shapes": Opt(List(Opt(SHAPE))),
                 "?timings_ms": Any(), "?fused_patterns": Any(), "?layout": Any(), "?folded_from": Any()}, extra=True)


class _Node(Schema):
    def check(self, value, path, errors):
        NODE.check(value, path, errors)
        if isinstance(value, dict) and "params" in value and isinstance(value.get("kind"), str):
            schema = PARAMS.get(value["kind"])
            if schema is not None:
                schema.check(value["params"], f"{path}.params", errors)
            declared = params_schema(value["kind"])
            if declared is not None and isinstance(value["params"], dict):
                declared.check(value["params"], f"{path}.params", errors)


GRAPH = Obj({"name": Str(), "inputs": List(TENSOR), "outputs": List(TENSOR), "?aliases": Map(Str()),
             "nodes": List(_Node()), "?meta": Obj({}, extra=True)})
NODE = Obj({"name": Str(nonempty=True), "kind": Str(nonempty=True), "inputs": List(Opt(Str())),
            "outputs": List(Str(nonempty=True)), "params": Map(Any()), "weights": Map(WEIGHT),
            "subgraphs": Map(Lazy(lambda: GRAPH)), "source_nodes": List(Str()),
            "?precision": Str(choices=PRECISIONS), "?tactic_id": Opt(Int(-2 ** 63, 2 ** 64 - 1)),
            "?tactic_name": Opt(Str()), "?meta": NODE_META})

PROFILE = Map(List(STATIC_SHAPE, min_len=3, max_len=3))
BUILD_CONFIG = Obj({"?flags": List(Str()), "?profiles": List(PROFILE), "?memory_pool_limits": Map(Num()),
                    "?profiling_verbosity": Str(), "?avg_timing_iterations": Int(1), "?device": Str(),
                    "?tactic_sources": Opt(List(Str()))}, extra=True)
DEVICE = Obj({"?device": Str(nonempty=True)}, extra=True)  # registered devices are checked by device_for_plan
HEADER = Obj({"producer": Obj({"name": Str(), "?version": Str()}, extra=True), "device": DEVICE,
              "build_config": BUILD_CONFIG, "graph": GRAPH}, extra=True)


# ---------------------------------------------------------------------------------------------------------------
# what the types cannot say: references inside the blob, names that exist, order without cycles, known kinds

def _itemsize(dtype):
    import numpy as np
    if dtype == "bfloat16":
        return 2
    if dtype.startswith("float8"):
        return 1
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def _check_weights(node, path, blob_len, errors):
    for key, ref in node["weights"].items():
        where = f"{path}.weights.{key}"
        count = math.prod(ref["shape"])
        if "encoding" in ref:
            if len(ref["values"]) != count:
                errors.append((f"{where}.values", f"holds {len(ref['values'])} values, shape {ref['shape']} needs "
                                                   f"{count}"))
            continue
        size = _itemsize(ref["dtype"])
        if size is not None and ref["nbytes"] != count * size:
            errors.append((f"{where}.nbytes", f"is {ref['nbytes']}, but shape {ref['shape']} of {ref['dtype']} needs "
                                              f"{count * size} bytes"))
        if ref["offset"] + ref["nbytes"] > blob_len:
            errors.append((f"{where}.offset", f"bytes {ref['offset']}..{ref['offset'] + ref['nbytes']} lie outside "
                                              f"the {blob_len}-byte weight blob"))
    for i, post in enumerate(node["params"].get("post_ops") or [] if isinstance(node["params"].get("post_ops"), list)
                             else []):
        w = post.get("weight") if isinstance(post, dict) else None
        if w is not None and w not in node["weights"]:
            errors.append((f"{path}.params.post_ops[{i}].weight", f"names weight '{w}', which the layer does not "
                                                                  f"have (it has {sorted(node['weights'])})"))
    if node["kind"] == "Constant" and "value" not in node["weights"]:
        errors.append((f"{path}.weights", "a Constant layer needs its 'value' weight"))


SPATIAL_KINDS = {"Convolution", "ConvolutionNHWC", "Deconvolution", "Pooling", "PoolingNHWC"}


def _check_geometry(node, where, errors):
    """A convolution's or pooling's kernel, strides, dilations and padding must give the output the layer
    records: a crafted plan cannot ask a kernel for a million rows of padding behind valid checksums."""
    p, meta = node["params"], node.get("meta") or {}
    if p.get("global"):
        return
    ins, outs = meta.get("input_shapes"), meta.get("output_shapes")
    if p.get("col2im") or p.get("auto_pad") not in (None, "NOTSET") or p.get("output_shape") is not None \
            or not ins or not outs or not ins[0] or not outs[0]:
        # shapes not recorded (the build's timing run failed), or not given by the pads (col2im, auto_pad,
        # output_shape): bound what the padding can ask for
        extents = [a + b + max(c, 1) for a, b, c in zip(p.get("pre_padding") or [], p.get("post_padding") or [],
                                                        p.get("kernel_shape") or p.get("window") or [])]
        if any(v > MAX_SPATIAL for v in extents) or math.prod(extents or [0]) > default_limits().max_elements:
            errors.append((f"{where}.params", f"padding and kernel extents {extents} exceed the limit "
                                              f"({MAX_SPATIAL} per axis) for a layer without recorded shapes"))
        shape = p.get("output_shape")
        if isinstance(shape, list) and math.prod(max(v, 1) for v in shape) > default_limits().max_elements:
            errors.append((f"{where}.params.output_shape", f"{shape} exceeds the tensor size limit"))
        return
    x, y = ins[0], outs[0]
    nhwc = node["kind"].endswith("NHWC")
    xs, ys = (x[1:-1], y[1:-1]) if nhwc else (x[2:], y[2:])
    k = p.get("kernel_shape") or p.get("window") or []
    n = len(k)
    if len(xs) != n or len(ys) != n:
        errors.append((f"{where}.params", f"a {n}-d kernel does not fit recorded shapes {x} -> {y}"))
        return
    s, d = p.get("strides") or [1] * n, p.get("dilations") or [1] * n
    pre, post = p.get("pre_padding") or [0] * n, p.get("post_padding") or [0] * n
    if not all(len(v) == n for v in (s, d, pre, post)):
        errors.append((f"{where}.params", f"strides, dilations and paddings need {n} values each"))
        return
    deconv = node["kind"] == "Deconvolution" or p.get("type") == "MAX_UNPOOL"
    extra = p.get("output_padding") or [0] * n
    for i in range(n):
        if xs[i] < 0 or ys[i] < 0:
            continue
        eff = d[i] * (k[i] - 1) + 1
        if deconv:
            want = [(xs[i] - 1) * s[i] - pre[i] - post[i] + eff + (extra[i] if i < len(extra) else 0)]
        else:
            span = xs[i] + pre[i] + post[i] - eff
            want = [span // s[i] + 1, -(-span // s[i]) + 1]  # floor or ceil mode
        if ys[i] not in want:
            errors.append((f"{where}.params", f"kernel {k}, strides {s}, dilations {d} and padding {pre}/{post} "
                                              f"give spatial size {want[0]} on axis {i}, the layer records {ys[i]}"))
            return


def _check_recorded_sizes(node, where, errors):
    limit = default_limits().max_elements
    for j, shape in enumerate((node.get("meta") or {}).get("output_shapes") or []):
        if shape and all(v >= 0 for v in shape) and math.prod(shape) > limit:
            errors.append((f"{where}.meta.output_shapes[{j}]", f"{shape} exceeds the tensor size limit"))


def _tactic_ids(kind, device) -> set:
    """Ids of `kind`'s tactics on the plan's device, the CPU and every registered device (a DLA loadable's body
    runs DLA tactics inside a CPU plan)."""
    ids = set()
    for d in dict.fromkeys([device, "cpu", *registered_devices()]):
        try:
            ids |= {t.id for t in tactics_for(kind, d)}
        except Exception:  # a device that cannot load here (no GPU): its ids are not known, nor runnable
            continue
    return ids


def _check_names(graph, path, outer: set, blob_len, kinds, device, depth, errors):
    if depth > MAX_DEPTH:
        errors.append((path, f"subgraphs nest deeper than {MAX_DEPTH} levels"))
        return
    defined = set(outer)
    for i, t in enumerate(graph["inputs"]):
        if t["name"] in defined - outer:
            errors.append((f"{path}.inputs[{i}].name", f"input '{t['name']}' is declared twice"))
        defined.add(t["name"])
    for i, node in enumerate(graph["nodes"]):
        where = f"{path}.nodes[{i}]"
        if node["kind"] not in kinds:
            errors.append((f"{where}.kind", f"'{node['kind'][:60]}' is not a layer kind this debugkit implements"))
        elif node.get("tactic_id") is not None:
            ids = _tactic_ids(node["kind"], device)
            if node["tactic_id"] not in ids:
                errors.append((f"{where}.tactic_id", f"no {node['kind']} tactic has id {node['tactic_id']} "
                                                     f"(known: {sorted(ids)})"))
        for j, name in enumerate(node["inputs"]):
            if name is not None and name not in defined:
                errors.append((f"{where}.inputs[{j}]", f"tensor '{name[:80]}' is not produced by an earlier layer or "
                                                       f"an input (a dangling reference or a cycle)"))
        _check_weights(node, where, blob_len, errors)
        _check_recorded_sizes(node, where, errors)
        if node["kind"] in SPATIAL_KINDS:
            _check_geometry(node, where, errors)
        for key, sub in node["subgraphs"].items():
            _check_names(sub, f"{where}.subgraphs.{key}", defined, blob_len, kinds, device, depth + 1, errors)
        for j, name in enumerate(node["outputs"]):
            if name in defined - outer:
                errors.append((f"{where}.outputs[{j}]", f"tensor '{name[:80]}' is produced twice"))
            defined.add(name)
        if len(errors) > 50:
            return
    for i, t in enumerate(graph["outputs"]):
        if t["name"] not in defined:
            errors.append((f"{path}.outputs[{i}].name", f"output '{t['name'][:80]}' is not produced by any layer"))
    # aliases (ONNX name -> tensor name) may name tensors that fusion removed: readers treat them as absent


def header_errors(header, blob_len: int) -> list[tuple[str, str]]:
    """Every defect of a plan header as (field path, message); empty when it is safe to build an engine from."""
    errors: list = []
    HEADER.check(header, "", errors)
    if errors:
        return errors
    device = header["device"].get("device", "cpu")
    kinds = set(registered_kinds("cpu"))
    _check_names(header["graph"], "graph", set(), blob_len, kinds, device, 0, errors)
    for i, prof in enumerate(header["build_config"].get("profiles", [])):
        for name, (lo, opt, hi) in prof.items():
            if not len(lo) == len(opt) == len(hi) or any(a > b or b > c for a, b, c in zip(lo, opt, hi)):
                errors.append((f"build_config.profiles[{i}].{name}", "min/opt/max must have one rank and "
                                                                     "min <= opt <= max"))
    return errors


def check_header(header, blob_len: int) -> None:
    """Raise PlanError naming the field path of the first defect (and how many more there are)."""
    errors = header_errors(header, blob_len)
    if not errors:
        return
    path, msg = errors[0]
    more = f" (and {len(errors) - 1} more defect(s))" if len(errors) > 1 else ""
    rest = "".join(f"\n  {p}: {m}" for p, m in errors[1:10])
    raise PlanError(f"plan header is malformed: {path or '<header>'}: {msg}{more}{rest}")
