"""Validate an untrusted ONNX model before anything else touches it (ONNX shape inference included).

A debugging tool is fed broken models on purpose. ONNX's own shape inference is C++ that trusts its input (a
MaxPool with `strides=[2, 0]` divides by zero and kills the process with SIGFPE), and our passes and kernels assume
what a well-formed model guarantees. `validate_model` walks the model once (subgraphs included) and checks:

- attributes against the operator's constraints: the type the schema declares; strides, dilations, kernel sizes
  positive; pads and output padding non-negative; per-axis lists of consistent length; group >= 1; an axis inside
  the input's rank where the rank is known from the model; values small enough for int64 shape arithmetic;
- node arity against the schema (too few or too many inputs/outputs);
- tensors (initializers, Constant values, tensor attributes): known data type, non-negative dims, an element count
  that matches the data actually present, and a size under the limit;
- declared shapes (inputs, outputs, value_info) and constant shape inputs (ConstantOfShape, Expand, Tile, Range,
  Random*) whose element count or memory would exceed the limit (default a quarter of physical memory);
- the nesting depth of subgraphs (If/Loop/Scan bodies).

Every problem is a `Problem(node, op_type, attribute, value, reason)`; `check_model` raises one ParseError that
lists them, its first line naming the first problem.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import onnx
from onnx import AttributeProto, TensorProto

from native.errors import ParseError
from native.limits import Limits, default_limits, physical_memory, set_limits  # noqa: F401 (re-exported)

INT_LIMIT = 2 ** 31 - 1  # attribute magnitudes beyond this overflow shape arithmetic downstream


@dataclass
class Problem:
    node: str
    op_type: str
    attribute: str
    value: object
    reason: str

    @property
    def detail(self) -> str:
        """The message without the node: attribute, value and reason."""
        what = "" if not self.attribute else f"{self.attribute}" if self.attribute.startswith("input") \
            else f"attribute '{self.attribute}'"
        value = "" if self.value is None else f" = {_short(self.value)}" if what else _short(self.value)
        return f"{what}{value}: {self.reason}" if what or value else self.reason

    def __str__(self):
        return f"node '{self.node}' ({self.op_type}): {self.detail}"


def _short(v, n=80):
    s = repr(list(v)) if isinstance(v, (list, tuple)) else repr(v)
    return s if len(s) <= n else s[:n] + "...]"


# ---------------------------------------------------------------------------------------------------------------
# tensors

_ITEMSIZE = {TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
             TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
             TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8,
             TensorProto.COMPLEX64: 8, TensorProto.COMPLEX128: 16, TensorProto.BFLOAT16: 2, TensorProto.STRING: 8}
for _name, _size in (("FLOAT8E4M3FN", 1), ("FLOAT8E4M3FNUZ", 1), ("FLOAT8E5M2", 1), ("FLOAT8E5M2FNUZ", 1),
                     ("FLOAT8E8M0", 1)):
    if hasattr(TensorProto, _name):
        _ITEMSIZE[getattr(TensorProto, _name)] = _size
_SUBBYTE = {getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1", "UINT2", "INT2") if hasattr(TensorProto, n)}
_KNOWN_TYPES = set(_ITEMSIZE) | _SUBBYTE

# which repeated field holds the values of each data type when raw_data is not used, and values per element
_FIELD = {TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
          TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
          TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1),
          TensorProto.UINT64: ("uint64_data", 1), TensorProto.STRING: ("string_data", 1)}


def _int32_field_count(dtype, count):
    """int32_data holds one value per element for small types; sub-byte types pack two (or four) per value."""
    if dtype in _SUBBYTE:
        per = 4 if dtype in {getattr(TensorProto, n) for n in ("UINT2", "INT2") if hasattr(TensorProto, n)} else 2
        return (count + per - 1) // per
    return count


def _check_dims(dims, limits, itemsize=4):
    """None when dims are sane, else the reason."""
    if len(dims) > limits.max_rank:
        return f"rank {len(dims)} exceeds the limit of {limits.max_rank}"
    if any(d < 0 for d in dims):
        return "dims must be >= 0"
    if any(d > limits.max_elements for d in dims):  # even with a 0 elsewhere: kernels loop over such dims
        return f"a dim exceeds the limit of {limits.max_elements} elements"
    count = math.prod(int(d) for d in dims)
    if count > limits.max_elements or count * itemsize > limits.max_bytes:
        return (f"{count} elements ({count * itemsize / 2**30:.3g} GiB) exceed the limit of "
                f"{limits.max_bytes / 2**30:.3g} GiB (DEBUGKIT_MAX_TENSOR_BYTES)")
    return None


def check_tensor(t: TensorProto, limits: Limits) -> str | None:
    """None when the tensor's type, dims and data agree and fit the limits, else the reason."""
    if t.data_type not in _KNOWN_TYPES:
        return f"unknown data type {t.data_type}"
    itemsize = _ITEMSIZE.get(t.data_type, 1)
    dims = list(t.dims)
    bad = _check_dims(dims, limits, itemsize)
    if bad:
        return f"tensor '{t.name}' dims {_short(dims)}: {bad}"
    count = math.prod(dims)
    if t.data_location == TensorProto.EXTERNAL:
        return None  # loaded by onnx from a file beside the model; its length is checked when it is read
    if t.HasField("raw_data"):
        if t.data_type == TensorProto.STRING:
            return f"tensor '{t.name}': strings cannot be stored as raw data"
        want = (count + 1) // 2 if t.data_type in _SUBBYTE else count * itemsize
        if t.data_type in _SUBBYTE and t.data_type not in (getattr(TensorProto, "INT4", -1),
                                                          getattr(TensorProto, "UINT4", -1),
                                                          getattr(TensorProto, "FLOAT4E2M1", -1)):
            want = (count + 3) // 4
        if len(t.raw_data) != want:
            return f"tensor '{t.name}' dims {_short(dims)} need {want} bytes of data, it holds {len(t.raw_data)}"
        return None
    field, per = _FIELD.get(t.data_type, ("int32_data", 1))
    have = len(getattr(t, field))
    want = _int32_field_count(t.data_type, count) if field == "int32_data" else count * per
    if have != want:
        return f"tensor '{t.name}' dims {_short(dims)} need {want} values in {field}, it holds {have}"
    return None


# ---------------------------------------------------------------------------------------------------------------
# attributes

_SPATIAL = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool", "MaxUnpool",
            "DeformConv", "Col2Im", "MaxRoiPool"}
_WEIGHTED_CONV = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv"}
_POSITIVE = ("kernel_shape", "strides", "dilations", "pooled_shape", "block_shape")
_NON_NEGATIVE = ("pads", "output_padding", "output_shape")
# ops whose `axis` / `axes` index the rank of input 0 (r) or r + 1 (Unsqueeze-like: the output's rank)
_AXIS_OPS = {"Concat", "Softmax", "LogSoftmax", "Hardmax", "Gather", "GatherElements", "ScatterElements", "Split",
             "Flatten", "CumSum", "ArgMax", "ArgMin", "LayerNormalization", "TopK", "Compress", "ReverseSequence",
             "OneHot", "DepthToSpace", "Squeeze", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
             "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "LpNormalization",
             "MeanVarianceNormalization", "Transpose", "QuantizeLinear", "DequantizeLinear"}


def _schema(op_type, domain, opset):
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # unknown op or domain: the parser reports it (or a plugin takes it)
        return None


def _attr_value(a: AttributeProto):
    if a.type == AttributeProto.INT:
        return a.i
    if a.type == AttributeProto.INTS:
        return list(a.ints)
    if a.type == AttributeProto.FLOAT:
        return a.f
    if a.type == AttributeProto.FLOATS:
        return list(a.floats)
    return None


def _check_attributes(node, schema, ranks, limits, out, label):
    declared = schema.attributes if schema is not None else {}
    attrs = {a.name: a for a in node.attribute}
    for a in node.attribute:
        if a.type == AttributeProto.UNDEFINED and not a.ref_attr_name:
            out.append(Problem(label, node.op_type, a.name, None, "attribute has no type"))
            continue
        spec = declared.get(a.name)
        if spec is not None and int(spec.type) != AttributeProto.UNDEFINED and int(spec.type) != a.type \
                and not a.ref_attr_name:
            out.append(Problem(label, node.op_type, a.name, _attr_value(a),
                               f"must be of type {AttributeProto.AttributeType.Name(int(spec.type))}, got "
                               f"{AttributeProto.AttributeType.Name(a.type)}"))
            continue
        v = _attr_value(a)
        if isinstance(v, int) and abs(v) > INT_LIMIT and a.name not in ("seed",):
            out.append(Problem(label, node.op_type, a.name, v, f"magnitude beyond {INT_LIMIT}"))
        elif isinstance(v, list) and v and isinstance(v[0], int) and any(abs(x) > INT_LIMIT for x in v):
            out.append(Problem(label, node.op_type, a.name, v, f"values of magnitude beyond {INT_LIMIT}"))
        elif isinstance(v, (float, list)) and a.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
            pass
    if node.op_type in _SPATIAL:
        _check_spatial(node, attrs, ranks, out, label)
    if node.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "Unique",
                        "GroupNormalization"):
        g = attrs.get("group") or attrs.get("num_groups")
        if g is not None and g.type == AttributeProto.INT and g.i < 1:
            out.append(Problem(label, node.op_type, g.name, g.i, "must be >= 1"))
    if node.op_type in ("DepthToSpace", "SpaceToDepth"):
        b = attrs.get("blocksize")
        if b is not None and b.type == AttributeProto.INT and b.i < 1:
            out.append(Problem(label, node.op_type, "blocksize", b.i, "must be >= 1"))
    if node.op_type in ("LRN",):
        s = attrs.get("size")
        if s is not None and s.type == AttributeProto.INT and s.i < 1:
            out.append(Problem(label, node.op_type, "size", s.i, "must be >= 1"))
    if node.op_type in _AXIS_OPS:
        rank = ranks.get(node.input[0]) if node.input else None
        if rank is not None:
            extra = 1 if node.op_type == "OneHot" else 0
            for name in ("axis", "axes"):
                a = attrs.get(name)
                if a is None or a.type not in (AttributeProto.INT, AttributeProto.INTS):
                    continue
                vals = [a.i] if a.type == AttributeProto.INT else list(a.ints)
                r = rank + extra
                if node.op_type in ("Flatten",):
                    r = rank + 1  # axis may equal the rank
                for x in vals:
                    if not -max(r, 1) <= x < max(r, 1):
                        out.append(Problem(label, node.op_type, name, _attr_value(a),
                                           f"axis {x} is out of range for an input of rank {rank}"))
                        break
        if node.op_type == "Transpose" and "perm" in attrs and rank is not None:
            perm = list(attrs["perm"].ints)
            if sorted(perm) != list(range(rank)):
                out.append(Problem(label, node.op_type, "perm", perm,
                                   f"is not a permutation of the {rank} axes of the input"))


def _check_spatial(node, attrs, ranks, out, label):
    ints = {n: list(attrs[n].ints) for n in (*_POSITIVE, *_NON_NEGATIVE) if n in attrs
            and attrs[n].type == AttributeProto.INTS}
    for name in _POSITIVE:
        if name in ints and any(x <= 0 for x in ints[name]):
            out.append(Problem(label, node.op_type, name, ints[name], "values must be positive"))
    for name in _NON_NEGATIVE:
        if name in ints and any(x < 0 for x in ints[name]):
            out.append(Problem(label, node.op_type, name, ints[name], "values must be >= 0"))
    if node.op_type in _WEIGHTED_CONV and len(node.input) > 1:
        # ONNX's ConvTranspose shape inference indexes dims without checking ranks (SIGSEGV / SIGABRT)
        xr = ranks.get(node.input[0])
        wr = ranks.get(node.input[3] if node.op_type == "QLinearConv" else node.input[1])
        if xr is not None and xr < 3:
            out.append(Problem(label, node.op_type, f"input 0 ('{node.input[0]}')", None,
                               f"has rank {xr}; a convolution takes rank 3 or more (N, C, spatial...)"))
        elif wr is not None and wr < 3:
            out.append(Problem(label, node.op_type, "input 1 (weights)", None,
                               f"has rank {wr}; convolution weights have rank 3 or more"))
        elif xr is not None and wr is not None and xr != wr:
            out.append(Problem(label, node.op_type, "input 1 (weights)", None,
                               f"has rank {wr}, the input rank {xr}; they must agree"))
    k = None
    if "kernel_shape" in ints:
        k = len(ints["kernel_shape"])
    elif node.op_type in ("Conv", "ConvTranspose", "ConvInteger", "DeformConv") and len(node.input) > 1:
        wrank = ranks.get(node.input[1] if node.op_type != "QLinearConv" else node.input[3])
        k = wrank - 2 if wrank is not None and wrank >= 2 else None
    elif node.input and ranks.get(node.input[0]) is not None and node.op_type != "Col2Im":
        k = max(ranks[node.input[0]] - 2, 0)
    if node.op_type in ("MaxPool", "AveragePool", "LpPool", "MaxUnpool") and "kernel_shape" not in ints:
        out.append(Problem(label, node.op_type, "kernel_shape", None, "is required"))
    if k is None:
        return
    for name in ("strides", "dilations", "output_padding", "kernel_shape"):
        if name in ints and len(ints[name]) != k:
            out.append(Problem(label, node.op_type, name, ints[name], f"needs {k} values (one per spatial axis)"))
    if "pads" in ints and len(ints["pads"]) != 2 * k:
        out.append(Problem(label, node.op_type, "pads", ints["pads"], f"needs {2 * k} values (begin and end per "
                                                                      f"spatial axis)"))
    if node.op_type == "ConvTranspose" and "output_padding" in ints and "strides" in ints and len(ints["strides"]) \
            == len(ints["output_padding"]):
        dil = ints.get("dilations") or [1] * k
        for op_, s, d in zip(ints["output_padding"], ints["strides"], dil):
            if op_ >= max(s, d):
                out.append(Problem(label, node.op_type, "output_padding", ints["output_padding"],
                                   "each value must be smaller than its stride or dilation"))
                break


def conv_geometry_problem(x_shape, w_shape, b_shape, groups, kernel_shape, transpose=False) -> str | None:
    """Why a (transposed) convolution's weights, bias, groups and input channels do not fit together, or None.
    Called by the Conv/ConvTranspose importers, which know the shapes (after shape inference)."""
    nd = len(kernel_shape)
    if w_shape is None:
        return None
    if len(w_shape) != nd + 2:
        return f"weights of shape {list(w_shape)} do not have rank {nd + 2} (kernel_shape {list(kernel_shape)})"
    if any(d >= 0 and d != k for d, k in zip(w_shape[2:], kernel_shape)):
        return f"weights of shape {list(w_shape)} do not match kernel_shape {list(kernel_shape)}"
    if groups < 1:
        return f"group {groups} must be >= 1"
    out_ch = w_shape[1] * groups if transpose else w_shape[0]
    in_ch = w_shape[0] if transpose else w_shape[1] * groups
    split = w_shape[0]
    if split >= 0 and split % groups:
        return f"group {groups} does not divide the {split} {'input' if transpose else 'output'} channels of the " \
               f"weights {list(w_shape)}"
    if x_shape is not None and len(x_shape) != nd + 2:
        return f"input of rank {len(x_shape)} does not fit a {nd}-d convolution (rank {nd + 2})"
    if x_shape is not None and x_shape[1] >= 0 and in_ch >= 0 and x_shape[1] != in_ch:
        return f"input has {x_shape[1]} channels; weights {list(w_shape)} with group {groups} need {in_ch}"
    if b_shape is not None and out_ch >= 0 and list(b_shape) not in ([out_ch], [-1]):
        return f"bias of shape {list(b_shape)} does not match the {out_ch} output channels"
    return None


# ---------------------------------------------------------------------------------------------------------------
# constant shape inputs that would allocate

def _const_ints(name, consts):
    t = consts.get(name)
    if t is None or t.data_type not in (TensorProto.INT64, TensorProto.INT32):
        return None
    try:
        from onnx import numpy_helper
        return [int(x) for x in numpy_helper.to_array(t).reshape(-1)]
    except Exception:
        return None


def _const_scalar(name, consts):
    t = consts.get(name)
    if t is None:
        return None
    try:
        from onnx import numpy_helper
        a = numpy_helper.to_array(t).reshape(-1)
        return float(a[0]) if a.size == 1 else None
    except Exception:
        return None


def _check_channel_params(node, consts, out, label):
    """BatchNormalization's scale, bias, mean and variance (InstanceNormalization's scale and bias) are one value
    per channel: 1-D and of one length, where they are constants."""
    lengths = {}
    for i, name in enumerate(node.input[1:], 1):
        t = consts.get(name)
        if t is None:
            continue
        if len(t.dims) != 1:
            out.append(Problem(label, node.op_type, f"input {i} ('{name}')", list(t.dims),
                               "per-channel parameters must be 1-D"))
            return
        lengths[name] = t.dims[0]
    if len(set(lengths.values())) > 1:
        out.append(Problem(label, node.op_type, "inputs", lengths, "per-channel parameters differ in length"))


def _check_allocations(node, consts, limits, out, label):
    op = node.op_type
    shape_input = {"ConstantOfShape": 0, "Expand": 1}.get(op)
    if shape_input is not None and len(node.input) > shape_input:
        dims = _const_ints(node.input[shape_input], consts)
        if dims is not None:
            dims = [max(d, 1) if op == "Expand" else d for d in dims]
            bad = _check_dims(dims, limits)
            if bad:
                out.append(Problem(label, op, f"input '{node.input[shape_input]}'", dims, bad))
    if op in ("RandomNormal", "RandomUniform"):
        for a in node.attribute:
            if a.name == "shape" and a.type == AttributeProto.INTS:
                bad = _check_dims(list(a.ints), limits)
                if bad:
                    out.append(Problem(label, op, "shape", list(a.ints), bad))
    if op == "Tile" and len(node.input) > 1:
        reps = _const_ints(node.input[1], consts)
        if reps is not None and (any(r < 0 for r in reps) or math.prod(reps) > limits.max_elements):
            out.append(Problem(label, op, f"input '{node.input[1]}'", reps,
                               "repeats must be >= 0 and their product under the element limit"))
    if op == "Range" and len(node.input) == 3:
        start, limit, delta = (_const_scalar(n, consts) for n in node.input)
        if delta is not None and delta == 0:
            out.append(Problem(label, op, f"input '{node.input[2]}'", delta, "delta must not be 0"))
        elif None not in (start, limit, delta) and all(map(math.isfinite, (start, limit, delta))):
            count = max(math.ceil((limit - start) / delta), 0)
            if count > limits.max_elements or count * 8 > limits.max_bytes:
                out.append(Problem(label, op, "inputs (start, limit, delta)", [start, limit, delta],
                                   f"would produce {count} elements, over the limit"))
        elif None not in (start, limit, delta):
            out.append(Problem(label, op, "inputs (start, limit, delta)", [start, limit, delta], "start, limit and delta must be finite"))


# ---------------------------------------------------------------------------------------------------------------
# graphs

def _value_info_problems(vi, limits, where, out):
    t = vi.type
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return
    dims = [d.dim_value for d in t.tensor_type.shape.dim]
    if any(d.HasField("dim_value") and d.dim_value < -1 for d in t.tensor_type.shape.dim):
        out.append(Problem(vi.name, where, "shape", dims, "dims must be >= 0, -1 or symbolic"))
        return
    static = [d.dim_value for d in t.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value >= 0]
    itemsize = _ITEMSIZE.get(t.tensor_type.elem_type, 1)
    bad = _check_dims(static, limits, itemsize)
    if bad:
        out.append(Problem(vi.name, where, "shape", dims, bad))
    elif t.tensor_type.elem_type and t.tensor_type.elem_type not in _KNOWN_TYPES:
        out.append(Problem(vi.name, where, "elem_type", t.tensor_type.elem_type, "unknown data type"))


def _rank_of_vi(vi):
    t = vi.type
    if t.WhichOneof("value") == "tensor_type" and t.tensor_type.HasField("shape"):
        return len(t.tensor_type.shape.dim)
    return None


def _non_text(node) -> str | None:
    """Names ONNX declares as strings but protobuf hands over as bytes when they are not valid UTF-8."""
    for what, values in (("name", [node.name]), ("op_type", [node.op_type]), ("domain", [node.domain]),
                         ("input name", node.input), ("output name", node.output),
                         ("attribute name", [a.name for a in node.attribute])):
        for v in values:
            if not isinstance(v, str):
                return f"{what} {v[:40]!r} is not valid UTF-8"
    return None


def _graph_text_problems(graph, out):
    if not isinstance(graph.name, str):
        out.append(Problem("<graph>", "graph", "name", None, f"graph name {graph.name[:40]!r} is not valid UTF-8"))
    for where, items in (("initializer", graph.initializer), ("graph input", graph.input),
                         ("graph output", graph.output), ("value_info", graph.value_info)):
        for item in items:
            if not isinstance(item.name, str):
                out.append(Problem(f"{item.name[:40]!r}", where, "", None, "name is not valid UTF-8"))


def _type_name(elem_type) -> str | None:
    try:
        return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
    except ValueError:
        return None


def _kind(type_str: str) -> str:
    t = type_str.replace("tensor(", "").replace("seq(", "").rstrip(")")
    if t.startswith(("float", "double", "bfloat")):
        return "float"
    if t.startswith(("int", "uint")):
        return "int"
    return t


def _check_input_types(node, schema, dtypes, out, label):
    """Inputs whose element type is known (initializers, Constants, graph inputs) against the operator's type
    constraints: a float Reshape shape or a string Conv weight stops here, not in a pass."""
    formals = list(schema.inputs)
    if not formals:
        return
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for i, name in enumerate(node.input):
        if not name or name not in dtypes:
            continue
        formal = formals[min(i, len(formals) - 1)]
        if i >= len(formals) and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
            continue
        allowed = constraints.get(formal.type_str, {formal.type_str})
        got = _type_name(dtypes[name])
        # the kind of type (float of any width, integer, bool, string) must fit: a float shape or a string
        # weight is refused; a double where the schema says float is left to the importers (fp64 references)
        if got is not None and allowed and _kind(got) not in {_kind(a) for a in allowed}:
            out.append(Problem(label, node.op_type, f"input {i} ('{name}', {formal.name})", None,
                               f"has type {got}; the operator takes {', '.join(sorted(allowed))}"))


def _check_graph(graph, opsets, limits, depth, out, ranks, consts, dtypes=None):
    dtypes = dict(dtypes or {})
    _graph_text_problems(graph, out)
    if out and out[-1].reason.endswith("not valid UTF-8"):
        return
    if depth > limits.max_depth:
        out.append(Problem(graph.name or "<subgraph>", "graph", "", depth,
                           f"subgraphs nest deeper than {limits.max_depth} levels"))
        return
    ranks, consts = dict(ranks), dict(consts)
    for t in graph.initializer:
        bad = check_tensor(t, limits)
        if bad:
            out.append(Problem(t.name, "initializer", "", None, bad))
            continue
        ranks[t.name] = len(t.dims)
        consts[t.name] = t
        dtypes[t.name] = t.data_type
    for sp in graph.sparse_initializer:
        for part in (sp.values, sp.indices):
            bad = check_tensor(part, limits)
            if bad:
                out.append(Problem(sp.values.name, "sparse_initializer", "", None, bad))
        bad = _check_dims(list(sp.dims), limits, _ITEMSIZE.get(sp.values.data_type, 1))
        if bad:
            out.append(Problem(sp.values.name, "sparse_initializer", "dims", list(sp.dims), bad))
    for where, vis in (("graph input", graph.input), ("graph output", graph.output), ("value_info", graph.value_info)):
        for vi in vis:
            _value_info_problems(vi, limits, where, out)
            if where == "graph input" and vi.name not in ranks:
                r = _rank_of_vi(vi)
                if r is not None:
                    ranks[vi.name] = r
                if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
                    dtypes.setdefault(vi.name, vi.type.tensor_type.elem_type)
    for index, node in enumerate(graph.node):
        bad_text = _non_text(node)
        if bad_text:
            label = node.name if isinstance(node.name, str) and node.name else f"node #{index}"
            out.append(Problem(label, node.op_type if isinstance(node.op_type, str) else "?", "", None, bad_text))
            continue
        label = node.name or f"{node.op_type}_{index}"
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = opsets.get(domain)
        schema = _schema(node.op_type, domain, opset) if opset is not None else None
        if schema is not None:
            n_in, n_out = len(node.input), len(node.output)
            if not schema.min_input <= n_in <= schema.max_input:
                out.append(Problem(label, node.op_type, "", None, f"has {n_in} inputs; the operator takes "
                                   f"{schema.min_input}..{min(schema.max_input, 2**31 - 1)}"))
            if not schema.min_output <= n_out <= schema.max_output:
                out.append(Problem(label, node.op_type, "", None, f"has {n_out} outputs; the operator gives "
                                   f"{schema.min_output}..{min(schema.max_output, 2**31 - 1)}"))
            for name, spec in schema.attributes.items():
                if spec.required and not any(a.name == name for a in node.attribute):
                    out.append(Problem(label, node.op_type, name, None, "is required"))
        if schema is not None:
            _check_input_types(node, schema, dtypes, out, label)
        _check_attributes(node, schema, ranks, limits, out, label)
        _check_allocations(node, consts, limits, out, label)
        if node.op_type in ("BatchNormalization", "InstanceNormalization"):
            _check_channel_params(node, consts, out, label)
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR or (a.type == AttributeProto.SPARSE_TENSOR):
                t = a.t if a.type == AttributeProto.TENSOR else a.sparse_tensor.values
                bad = check_tensor(t, limits)
                if bad:
                    out.append(Problem(label, node.op_type, a.name, None, bad))
                elif node.op_type == "Constant" and a.type == AttributeProto.TENSOR and node.output:
                    ranks[node.output[0]] = len(t.dims)
                    consts[node.output[0]] = t
                    dtypes[node.output[0]] = t.data_type
            elif a.type == AttributeProto.TENSORS:
                for t in a.tensors:
                    bad = check_tensor(t, limits)
                    if bad:
                        out.append(Problem(label, node.op_type, a.name, None, bad))
            elif a.type == AttributeProto.GRAPH:
                _check_graph(a.g, opsets, limits, depth + 1, out, ranks, consts, dtypes)
            elif a.type == AttributeProto.GRAPHS:
                for g in a.graphs:
                    _check_graph(g, opsets, limits, depth + 1, out, ranks, consts, dtypes)
            elif node.op_type == "Constant" and a.type == AttributeProto.INTS and node.output:
                ranks[node.output[0]] = 1
            elif node.op_type == "Constant" and a.type in (AttributeProto.INT, AttributeProto.FLOAT) and node.output:
                ranks[node.output[0]] = 0
        if len(out) > 200:
            return


def oversized_tensors(network, limits: Limits | None = None) -> list[Problem]:
    """Tensors of a parsed network whose static shape (declared or inferred) exceeds the limits: a Tile, Expand,
    Resize or Pad that would allocate more than the machine allows is refused before the builder runs it."""
    limits = limits or default_limits()
    out = []
    for t in list(network.tensors.values()):
        shape = t.shape
        if not shape or any(not isinstance(d, int) or d < 0 for d in shape):
            continue
        try:
            itemsize = int(t.dtype.itemsize) if t.dtype is not None else 4
        except Exception:
            itemsize = 4
        bad = _check_dims(list(shape), limits, itemsize)
        if bad:
            layer = t.producer
            node = (layer.source_nodes[0] if layer is not None and layer.source_nodes else
                    layer.name if layer is not None else t.name)
            kind = layer.kind if layer is not None else "input"
            out.append(Problem(node, kind, "", None, f"output '{t.name}' of shape {list(shape)}: {bad}"))
            if len(out) >= 5:
                break
    return out


DATA_PROP_MAX = 1 << 16  # elements a constant Tile/Expand/ConstantOfShape/Range factor may have for data propagation


def data_prop_safe(model) -> bool:
    """Whether ONNX shape inference may propagate values: it materialises what it propagates, so a Tile by 16M
    runs for minutes and exhausts memory. Such models are inferred without propagation (shapes only)."""
    consts = {t.name: t for g in _graphs(model.graph) for t in g.initializer}
    for g in _graphs(model.graph):
        for n in g.node:
            idx = {"Tile": 1, "Expand": 1, "ConstantOfShape": 0}.get(n.op_type)
            if idx is not None and len(n.input) > idx:
                vals = _const_ints(n.input[idx], consts)
                if vals is not None and math.prod(max(v, 1) for v in vals) > DATA_PROP_MAX:
                    return False
            elif n.op_type == "Range" and len(n.input) == 3:
                start, limit, delta = (_const_scalar(x, consts) for x in n.input)
                if None not in (start, limit, delta) and delta and all(map(math.isfinite, (start, limit, delta))) \
                        and (limit - start) / delta > DATA_PROP_MAX:
                    return False
    return True


class negative_dims_unknown:
    """`with negative_dims_unknown(model):` declared dims of -1 (some exporters' "dynamic") read as unknown dims
    for the duration: ONNX shape inference propagates them as sizes and asserts (SIGABRT) in Slice's clamp."""

    def __init__(self, model):
        self.model, self.changed = model, []

    def __enter__(self):
        g = self.model.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            t = vi.type
            if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
                continue
            for d in t.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    self.changed.append((d, d.dim_value))
                    d.ClearField("dim_value")
        return self.model

    def __exit__(self, *exc):
        for d, v in self.changed:
            d.dim_value = v
        return False


RANK_SENSITIVE = {"ConvTranspose"}  # ops whose ONNX shape inference crashes on inputs of the wrong rank


def _graphs(graph):
    yield graph
    for n in graph.node:
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graphs(g)


def _inferred_rank_problems(model) -> list[Problem]:
    """Ranks of the inputs of rank-sensitive nodes that only shape inference can tell (computed tensors): infer
    the model without those nodes first, then check what they would receive."""
    if not any(n.op_type in RANK_SENSITIVE for g in _graphs(model.graph) for n in g.node):
        return []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for g in _graphs(probe.graph):
        keep = [n for n in g.node if n.op_type not in RANK_SENSITIVE]
        if len(keep) != len(g.node):
            del g.node[:]
            g.node.extend(keep)
    try:
        with negative_dims_unknown(probe):
            inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:
        return []
    ranks = {}
    for g in _graphs(inferred.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            r = _rank_of_vi(vi)
            if r is not None:
                ranks[vi.name] = r
        for t in g.initializer:
            ranks[t.name] = len(t.dims)
    out = []
    for g in _graphs(model.graph):
        for i, n in enumerate(g.node):
            if n.op_type in RANK_SENSITIVE:
                label = n.name or f"{n.op_type}_{i}"
                attrs = {a.name: a for a in n.attribute}
                _check_spatial(n, attrs, ranks, out, label)
    return out


def validate_model(model: onnx.ModelProto, limits: Limits | None = None) -> list[Problem]:
    """Every problem found in `model` (empty when it is safe to hand to shape inference and the importers)."""
    limits = limits or default_limits()
    out: list[Problem] = []
    opsets = {}
    for imp in model.opset_import:
        dom = "" if imp.domain in ("", "ai.onnx") else imp.domain
        if imp.version < 1 or imp.version > 10_000:
            out.append(Problem("<model>", "opset_import", dom or "ai.onnx", imp.version, "opset version out of range"))
            continue
        opsets[dom] = imp.version
    opsets.setdefault("", 1) if not model.opset_import else None
    for f in model.functions:
        for node in f.node:
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    _check_graph(a.g, opsets, limits, 1, out, {}, {})
    _check_graph(model.graph, opsets, limits, 0, out, {}, {})
    if not out and any(n.op_type in RANK_SENSITIVE for g in _graphs(model.graph) for n in g.node) \
            and model.ByteSize() < 2 ** 31 - 2 ** 20:   # ByteSize walks the whole model: only when needed
        out.extend(_inferred_rank_problems(model))
    return out


def check_model(model: onnx.ModelProto, what: str = "model", limits: Limits | None = None) -> None:
    """Raise ParseError (first line: the first problem; then up to 20 more) when `model` fails validation."""
    problems = validate_model(model, limits)
    if not problems:
        return
    lines = "\n  ".join(map(str, problems[1:20]))
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    rest = f"\n  {lines}{more}" if lines else ""
    raise ParseError(f"invalid {what}: {problems[0]}" + (f" (and {len(problems) - 1} more problem(s))" if
                                                           len(problems) > 1 else "") + rest,
                     problems)
